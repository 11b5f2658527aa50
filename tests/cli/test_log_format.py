"""``--log-format json``: every log line of the agent and the scaler (its ingest workers too) is one JSON
object with time, level, logger and message; a traceback travels inside its line; a bad format is one line,
exit 2."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from datetime import datetime

import pytest

from gpuscale.logs import JsonFormatter


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lines_until(argv: list[str], marker: str, env: dict[str, str] | None = None) -> list[str]:
    """Run ``gpuscale ARGV``; its stderr lines until one contains ``marker`` (then stop it with SIGTERM)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscale", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while not any(marker in line for line in lines):
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, lines
            lines.append(line.rstrip("\n"))
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=15)[1]
    return lines + rest.splitlines()


def _check_json(lines: list[str]) -> list[dict[str, str]]:
    out = []
    for line in lines:
        if line.startswith(("I", "E", "W", "D")) and not line.startswith("{"):  # gRPC core's own log lines
            continue
        obj = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(obj), obj
        assert obj["time"].endswith("Z") and datetime.fromisoformat(obj["time"].replace("Z", "+00:00"))
        assert obj["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        out.append(obj)
    return out


@pytest.mark.timeout(60)
def test_the_agent_logs_json_lines() -> None:
    argv = [
        "--log-format",
        "json",
        "agent",
        "--backend",
        "mock",
        "--node-name",
        "node-a",
        "--grpc-address",
        f"127.0.0.1:{_free()}",
        "--metrics-address",
        f"127.0.0.1:{_free()}",
    ]
    objs = _check_json(_lines_until(argv, "serving gRPC"))
    assert any(
        o["logger"] == "gpuscale.cli.agent" and o["message"].startswith("agent node-a serving gRPC")
        for o in objs
    ), objs


@pytest.mark.timeout(60)
def test_the_scaler_and_its_ingest_workers_log_json_lines_from_the_environment() -> None:
    argv = [
        "scaler",
        "--agents",
        f"127.0.0.1:{_free()}",
        "--ingest-workers",
        "1",
        "--grpc-address",
        f"127.0.0.1:{_free()}",
        "--metrics-address",
        f"127.0.0.1:{_free()}",
    ]
    objs = _check_json(
        _lines_until(argv, "cannot follow its Watch stream", env={"GPUSCALE_LOG_FORMAT": "json"})
    )
    (warning,) = [o for o in objs if "cannot follow" in o["message"]]
    assert warning["process"] == "ingest" and warning["level"] == "WARNING"


def test_a_traceback_stays_in_its_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "gpuscale.x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["message"] == "failed here" and obj["level"] == "ERROR" and obj["logger"] == "gpuscale.x"
    assert obj["exception"].startswith("Traceback") and obj["exception"].endswith("ValueError: boom")


@pytest.mark.parametrize(
    ("argv", "env"), [(["--log-format", "xml"], {}), ([], {"GPUSCALE_LOG_FORMAT": "xml"})]
)
def test_a_bad_log_format_is_one_line_and_exit_2(argv: list[str], env: dict[str, str]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gpuscale", *argv, "probe", "--backend", "mock"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **env},
    )
    assert run.returncode == 2
    assert run.stderr.splitlines() == ['gpuscale: error: --log-format "xml" must be one of text, json']
