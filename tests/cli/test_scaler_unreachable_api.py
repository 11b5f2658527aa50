"""``gpuscale scaler --kubeconfig`` with a server nothing listens on (the real CLI in a subprocess): one
warning line naming the server, ``/readyz`` 503 saying why, ``/healthz`` 200 (restarting would not help)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.fakes.apiserver import write_kubeconfig
from tests.poll import until_sync

SERVER = "https://127.0.0.1:1"


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def test_an_unreachable_api_is_one_warning_and_not_ready(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc-unreach.yaml", SERVER)
    metrics = _free()
    argv = [
        *("scaler", "--agents", f"127.0.0.1:{_free()}", "--kubeconfig", str(kubeconfig)),
        *("--grpc-address", f"127.0.0.1:{_free()}", "--metrics-address", f"127.0.0.1:{metrics}"),
        *("--ready-grace", "0.5"),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscale", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GPUSCALE_EVENT_LOOP": "asyncio"},
    )
    try:
        status, body = until_sync(
            lambda: _get(metrics, "/readyz"),
            15,
            "/readyz naming the Kubernetes API alone (past --ready-grace)",
            interval=0.2,
            ok=lambda got: got[1].startswith("the Kubernetes API"),
        )
        assert status == 503, body
        assert body.startswith(f"the Kubernetes API at {SERVER} cannot be reached: Cannot connect to host"), (
            body
        )
        assert _get(metrics, "/healthz") == (200, "ok\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 0, stderr
    lines = [line for line in stderr.splitlines() if SERVER in line]
    assert len(lines) == 1, stderr
    assert "WARNING" in lines[0] and f"the Kubernetes API at {SERVER} cannot be reached (" in lines[0]
    assert "Traceback" not in stderr, stderr
