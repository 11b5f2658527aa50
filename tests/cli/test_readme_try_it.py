"""The README's agent + scaler + query, run as written (the ports moved to free ones): the query answers the
value the README says, and the workload query it describes answers what it says too."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.poll import until_sync

README = Path(__file__).resolve().parents[2] / "README.md"


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def readme_commands() -> dict[str, list[str]]:
    """The README's ``gpuscale agent``, ``scaler`` and ``query`` lines (continuations joined, comments cut)."""
    text = README.read_text().replace("\\\n", " ")
    found = {}
    for name in ("agent", "scaler", "query"):
        (line,) = re.findall(rf"^\.venv/bin/gpuscale {name} .*$", text, re.M)
        found[name] = shlex.split(line, comments=True)[1:]
    return found


def test_every_command_of_try_it_runs_from_a_fresh_checkout() -> None:
    """``gpuscale`` is on no PATH until the virtual environment is activated: each command of "Try it" and
    "The other commands" is ``.venv/bin/gpuscale``, as the first ones are."""
    section = README.read_text().split("## Try it\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.M | re.S)
    lines = [line for block in blocks for line in block.splitlines() if line and not line.startswith(" ")]
    assert len(lines) >= 9, lines
    assert [line for line in lines if not line.startswith(".venv/bin/gpuscale ")] == []


def _gpuscale(*argv: str) -> list[str]:
    return [sys.executable, "-m", "gpuscale", "--log-level", "warning", *argv]


@pytest.mark.timeout(90)
def test_the_readme_query_answers_what_the_readme_says() -> None:
    cmds = readme_commands()
    agent_grpc, scaler_grpc = _free(), _free()

    def moved(argv: list[str]) -> list[str]:
        return [
            a.replace("127.0.0.1:6000", f"127.0.0.1:{agent_grpc}").replace(
                "127.0.0.1:6001", f"127.0.0.1:{scaler_grpc}"
            )
            for a in argv
        ]

    env = {**os.environ, "COLUMNS": "200"}
    procs = [
        subprocess.Popen(
            _gpuscale(
                *moved(cmds["agent"]),
                "--grpc-address",
                f"127.0.0.1:{agent_grpc}",
                "--metrics-address",
                f"127.0.0.1:{_free()}",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        ),
        subprocess.Popen(
            _gpuscale(
                *moved(cmds["scaler"]),
                "--grpc-address",
                f"127.0.0.1:{scaler_grpc}",
                "--metrics-address",
                f"127.0.0.1:{_free()}",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        ),
    ]
    try:
        query = _gpuscale(*moved(cmds["query"]))
        run = until_sync(  # the agent and the scaler may still be starting
            lambda: subprocess.run(query, capture_output=True, text=True, timeout=30, env=env),
            60,
            "the README's query answering",
            interval=0.3,
            ok=lambda r: r.returncode == 0,
        )
        assert "value 70 (int 70)\n" in run.stdout and run.stdout.endswith("IsActive: true\n"), run.stdout
        text = README.read_text()
        assert "answers `value 70` and `IsActive: true`" in text

        # The workload query the README describes: 0 and inactive, as it says.
        command, *argv = moved(cmds["query"])
        pairs = list(zip(argv[::2], argv[1::2], strict=True))  # --flag value and -m key=value, in pairs
        workload = (
            [command]
            + [
                x
                for flag, value in pairs
                if not value.startswith(("scope=", "nodeSelector="))
                for x in (flag, value)
            ]
            + ["-m", "podSelector=app=llm"]
        )
        run = subprocess.run(_gpuscale(*workload), capture_output=True, text=True, timeout=30, env=env)
        assert run.returncode == 0, run.stderr
        assert "value 0 (int 0)\n" in run.stdout and run.stdout.endswith("IsActive: false\n"), run.stdout
        assert "answers `value 0` and `IsActive: false` here" in text.replace("\n", " ")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
