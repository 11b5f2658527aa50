"""On/off settings from the environment (``GPUSCALE_SERVE_EXTERNAL_SCALER``): the usual spellings of true and
false are read as such, the flag wins over the variable, and anything else is one line naming the variable,
exit 2 (``=yes`` used to mean off without a word)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuscale.cli import build_parser
from gpuscale.cli.agent import settings_from_args

AGENT = ["agent", "--backend", "mock", "--node-name", "n"]


def _serves_external_scaler(monkeypatch: pytest.MonkeyPatch, value: str | None, *flags: str) -> bool:
    if value is None:
        monkeypatch.delenv("GPUSCALE_SERVE_EXTERNAL_SCALER", raising=False)
    else:
        monkeypatch.setenv("GPUSCALE_SERVE_EXTERNAL_SCALER", value)
    argv = [*AGENT, *flags]
    return settings_from_args(build_parser(argv).parse_args(argv)).serve_external_scaler


@pytest.mark.parametrize("value", ["1", "true", "True", "TRUE", "yes", "Yes", "on", "ON", " true "])
def test_true_spellings(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    assert _serves_external_scaler(monkeypatch, value) is True


@pytest.mark.parametrize("value", ["0", "false", "False", "no", "NO", "off", "", None])
def test_false_spellings_and_unset(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    assert _serves_external_scaler(monkeypatch, value) is False


def test_the_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _serves_external_scaler(monkeypatch, "false", "--serve-external-scaler") is True


@pytest.mark.parametrize("value", ["maybe", "enabled", "2", "yess"])
def test_anything_else_is_one_line_and_exit_2(value: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gpuscale", "--log-level", "error", *AGENT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPUSCALE_SERVE_EXTERNAL_SCALER": value},
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [
        f'gpuscale: error: GPUSCALE_SERVE_EXTERNAL_SCALER "{value}" must be true or false '
        "(also 1/0, yes/no, on/off; empty: false)"
    ]
