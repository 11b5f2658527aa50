"""Flags of the long-running commands. ``--event-loop``: the agent and the scaler run on uvloop when it is
installed (``auto``), on asyncio's own loop when asked, and refuse an unknown or unavailable loop before
starting anything. ``--ingest-workers`` (``GPUSCALE_INGEST_WORKERS``): a whole number from 0 to 64, the
chart's bound too; a bad value is one line naming where it came from."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from typing import Any

import pytest

from gpuscale import lifecycle

needs_uvloop = pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed")


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


@needs_uvloop
@pytest.mark.parametrize(
    ("name", "module"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_run_uses_the_loop_asked_for(name: str, module: str) -> None:
    assert lifecycle.run(_loop_module(), name).split(".")[0] == module


def test_unknown_loop_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r'event loop "trio" is unknown; choose one of auto, uvloop, asyncio'
    ):
        lifecycle.event_loop_factory("trio")


@pytest.mark.parametrize("command", ["agent", "scaler"])
def test_cli_refuses_a_bad_event_loop_with_exit_code_2(command: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuscale", command, "--event-loop", "trio"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "GPUSCALE_BACKEND": "mock", "GPUSCALE_AGENTS": "127.0.0.1:1"},
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().endswith(
        'gpuscale: error: --event-loop: event loop "trio" is unknown; choose one of auto, uvloop, asyncio'
    ), r.stderr


@pytest.mark.parametrize("value", ["-1", "two", "1.5", "65", "100000"])
def test_scaler_refuses_a_bad_ingest_workers_count(value: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuscale", "scaler", "--agents", "127.0.0.1:1", "--ingest-workers", value],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2, r.stderr
    assert (
        r.stderr.strip() == f'gpuscale: error: --ingest-workers "{value}" must be a whole number from 0 to 64'
    )


def test_scaler_refuses_a_bad_ingest_workers_count_from_the_environment() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuscale", "scaler", "--agents", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "GPUSCALE_INGEST_WORKERS": "100000"},
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        'gpuscale: error: GPUSCALE_INGEST_WORKERS "100000" must be a whole number from 0 to 64'
    )


@pytest.mark.parametrize(
    ("flag", "environment", "workers"),
    [(None, None, 0), (None, "64", 64), ("3", "100000", 3), ("0", None, 0)],
)
def test_ingest_workers_from_the_flag_else_the_environment(
    flag: str | None, environment: str | None, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from gpuscale.cli import scaler as cli

    if environment is None:
        monkeypatch.delenv("GPUSCALE_INGEST_WORKERS", raising=False)
    else:
        monkeypatch.setenv("GPUSCALE_INGEST_WORKERS", environment)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    given = ["--ingest-workers", flag] if flag is not None else []
    args = parser.parse_args(["scaler", "--agents", "127.0.0.1:6000", *given])
    assert cli.settings_from_args(args).ingest_workers == workers


def test_the_chart_bounds_ingest_workers_as_the_scaler_does() -> None:
    import json
    from pathlib import Path

    from gpuscale.scaler.ingest import MAX_WORKERS

    schema = json.loads((Path(__file__).parents[2] / "deploy/helm/gpuscale/values.schema.json").read_text())
    bounds = schema["properties"]["scaler"]["properties"]["ingestWorkers"]
    assert (bounds["minimum"], bounds["maximum"]) == (0, MAX_WORKERS)


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["agent", "--backend", "mock"], "agent"),
        (["--log-level", "debug", "scaler"], "scaler"),
        (["--log-level=debug", "demo"], "demo"),
        (["--version"], None),
        (["agnt"], None),
        ([], None),
    ],
)
def test_command_in(argv: list[str], command: str | None) -> None:
    from gpuscale.cli import command_in

    assert command_in(argv) == command


def test_the_agent_does_not_load_the_other_commands() -> None:
    """``gpuscale agent`` runs on every GPU node: the simulator, demo and renderer stay out of its memory."""
    code = (
        "import sys; from gpuscale.cli import build_parser; build_parser(['--log-level', 'info', 'agent']); "
        "print(sorted(m for m in sys.modules if m.startswith(('gpuscale.sim', 'gpuscale.demo', "
        "'gpuscale.render', 'gpuscale.cli.scaler', 'gpuscale.cli.simulate', 'matplotlib'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--agent-tls-server-name", "a.b.svc"], "TLS to the agents needs --agent-tls-ca"),
        (
            ["--agent-tls-ca", "{ca}", "--agent-tls-cert", "{ca}"],
            "--agent-tls-cert and --agent-tls-key go together",
        ),
        (["--agent-tls-ca", "/nonexistent/ca.crt"], "--agent-tls-ca"),
        (["--tls-cert", "{ca}"], "TLS needs both --tls-cert and --tls-key"),
    ],
)
def test_tls_flags_are_checked_before_starting(flags: list[str], message: str, tmp_path: Any) -> None:
    import argparse

    from gpuscale.cli import scaler as cli
    from gpuscale.errors import UsageError

    ca = tmp_path / "ca.crt"
    ca.write_text("not checked here")
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["scaler", "--agents", "127.0.0.1:6000", *(f.format(ca=ca) for f in flags)])
    with pytest.raises(UsageError, match=message):
        cli.settings_from_args(args)


def test_agent_tls_flags_reach_the_subscriber(tmp_path: Any) -> None:
    import argparse

    from gpuscale.cli import scaler as cli
    from tests.scaler.certs import make_pki

    pki = make_pki(tmp_path)  # checked at start: PEM files that load
    files = [str(pki.ca), str(pki.client_cert), str(pki.client_key)]
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "scaler",
            "--agents",
            "127.0.0.1:6000",
            "--agent-tls-ca",
            files[0],
            "--agent-tls-cert",
            files[1],
            "--agent-tls-key",
            files[2],
            "--agent-tls-server-name",
            "gpuscale-agent.ns.svc",
        ]
    )
    s = cli.settings_from_args(args).subscriber
    assert (s.tls_ca, s.tls_cert, s.tls_key, s.tls_server_name) == (*files, "gpuscale-agent.ns.svc")
