"""``gpuscale scaler`` stops on SIGTERM or SIGINT at any point of its start-up, its ingest workers with it.

A real scaler process with the most ingest workers it takes gets the signal while it spawns them (its first
worker is up, the others are not); it must be gone within seconds, not after spawning the rest, and leave no
worker behind. The scaler runs in a session of its own, so every process it started is found by session id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from gpuscale.scaler.ingest import MAX_WORKERS
from tests.cli.sessions import children, free_port, in_session
from tests.poll import until_sync


def _scaler(workers: int, stderr: IO[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "scaler",
            "--agents",
            f"127.0.0.1:{free_port()}",
            "--ingest-workers",
            str(workers),
            "--grpc-address",
            f"127.0.0.1:{free_port()}",
            "--metrics-address",
            f"127.0.0.1:{free_port()}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )


@pytest.mark.timeout(45)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_ingest_workers_spawn_stops_the_scaler_and_its_workers(
    sig: signal.Signals, tmp_path: Path
) -> None:
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        proc = _scaler(MAX_WORKERS, stderr)

    def workers() -> list[int]:
        assert proc.poll() is None, log.read_text()
        return children(proc.pid)

    try:
        until_sync(workers, 20, "an ingest worker spawned", interval=0.01)  # the scaler is spawning
        assert len(children(proc.pid)) < MAX_WORKERS, "every worker was up before the signal: not mid-spawn"
        sent = time.monotonic()
        proc.send_signal(sig)  # to the scaler alone: its workers are its to stop
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the scaler was still running 20 s after {sig.name}")
        took = time.monotonic() - sent
        left = children(proc.pid)
        text = log.read_text()
        # it acts within a second; 5 s leaves room for a loaded machine (it took minutes when it did not)
        assert took < 5.0, f"the scaler took {took:.1f} s to stop after {sig.name}:\n{text}"
        assert left == [], f"{len(left)} ingest workers outlived the scaler:\n{text}"
        assert proc.returncode == 0, text
        assert "Traceback" not in text, text
    finally:
        for pid in in_session(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.timeout(45)
def test_a_signal_once_serving_stops_the_scaler_and_its_workers(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        proc = _scaler(2, stderr)

    def running_log() -> str:
        assert proc.poll() is None, log.read_text()
        return log.read_text()

    try:
        until_sync(running_log, 30, "the scaler serving gRPC", ok=lambda text: "scaler serving gRPC" in text)
        assert len(children(proc.pid)) == 2
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        took = time.monotonic() - sent
        left = children(proc.pid)
        text = log.read_text()
        assert took < 8.0, f"the scaler took {took:.1f} s to stop:\n{text}"
        assert left == [], f"{len(left)} ingest workers outlived the scaler:\n{text}"
        assert proc.returncode == 0, text
        assert "Traceback" not in text, text
    finally:
        for pid in in_session(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)
