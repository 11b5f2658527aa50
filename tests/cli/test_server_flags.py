"""Flags of the long-running commands. ``--event-loop``: the agent and the scaler run on uvloop when it is
installed (``auto``), on asyncio's own loop when asked, and refuse an unknown or unavailable loop before
starting anything. ``--ingest-workers``: a whole number, 0 or more."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys

import pytest

from gpuscale import lifecycle

needs_uvloop = pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed")


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


@needs_uvloop
@pytest.mark.parametrize(("name", "module"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_run_uses_the_loop_asked_for(name: str, module: str) -> None:
    assert lifecycle.run(_loop_module(), name).split(".")[0] == module


def test_unknown_loop_is_refused() -> None:
    with pytest.raises(ValueError, match=r'event loop "trio" is unknown; choose one of auto, uvloop, asyncio'):
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


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_scaler_refuses_a_bad_ingest_workers_count(value: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuscale", "scaler", "--agents", "127.0.0.1:1", "--ingest-workers", value],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f'gpuscale: error: --ingest-workers "{value}" must be a whole number, 0 or more'


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
