"""``gpuscale agent`` stops on SIGTERM or SIGINT at any point of its start-up, leaving no child behind.

The start-up that takes long here is a real one: the agent's kubeconfig authenticates with an exec credential
plugin (``users[].user.exec``, as EKS's ``aws eks get-token`` or GKE's ``gke-gcloud-auth-plugin`` do), and this
plugin takes a minute to answer. A real agent process gets the signal while the plugin runs; it must be gone
within seconds, with the plugin, not a minute later. The agent runs in a session of its own, so every process
it started is found by session id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from tests.cli.sessions import children, free_port, in_session
from tests.poll import until_sync

PLUGIN_SECONDS = 60


def _slow_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose credential plugin (one process: the Python that runs the tests) answers after
    ``PLUGIN_SECONDS``."""
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "t"},
    }
    plugin = f"import time; time.sleep({PLUGIN_SECONDS}); print({json.dumps(json.dumps(credential))})"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": sys.executable,
                        "args": ["-c", plugin],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def _agent(kubeconfig: Path, tmp_path: Path, stderr: IO[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "agent",
            "--backend",
            "mock",
            "--node-name",
            "n",
            "--kubeconfig",
            str(kubeconfig),
            "--kubelet-socket",
            str(tmp_path / "kubelet.sock"),
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
def test_a_signal_while_the_credential_plugin_runs_stops_the_agent_and_the_plugin(
    sig: signal.Signals, tmp_path: Path
) -> None:
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        proc = _agent(_slow_kubeconfig(tmp_path), tmp_path, stderr)

    def plugins() -> list[int]:
        assert proc.poll() is None, log.read_text()
        return children(proc.pid)

    try:
        # the plugin is running: the agent is starting
        until_sync(plugins, 20, "the agent's credential plugin started", interval=0.01)
        time.sleep(0.5)  # the agent is waiting on the plugin's answer
        assert proc.poll() is None, log.read_text()
        sent = time.monotonic()
        proc.send_signal(sig)  # to the agent alone: the plugin is its to stop
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the agent was still running 20 s after {sig.name}")
        took = time.monotonic() - sent
        left = children(proc.pid)
        text = log.read_text()
        # it acts within a second; 5 s leaves room for a loaded machine (it waited for the plugin when it did
        # not act)
        assert took < 5.0, f"the agent took {took:.1f} s to stop after {sig.name}:\n{text}"
        assert left == [], f"the credential plugin outlived the agent:\n{text}"
        assert proc.returncode == 0, text
        assert "Traceback" not in text, text
    finally:
        for pid in in_session(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)
