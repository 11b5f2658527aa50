"""``--kubeconfig`` that is missing or not a kubeconfig: the agent and the scaler say so in one line naming
the flag and exit 2 (the real CLI in a subprocess), before serving anything."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = {
    "agent": ["agent", "--backend", "mock", "--node-name", "n"],
    "scaler": ["scaler", "--agents", "127.0.0.1:1"],
}


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(command: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [
        *COMMANDS[command],
        "--grpc-address",
        f"127.0.0.1:{_free()}",
        "--metrics-address",
        f"127.0.0.1:{_free()}",
        *extra,
    ]
    return subprocess.run(
        [sys.executable, "-m", "gpuscale", "--log-level", "error", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_kubeconfig_is_one_line_and_exit_2(command: str) -> None:
    run = _run(command, "--kubeconfig", "/nonexistent")
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == ['gpuscale: error: --kubeconfig "/nonexistent" is not a readable file']


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_environment_variable_is_checked_the_same_way(command: str) -> None:
    run = _run(command, env={"GPUSCALE_KUBECONFIG_PATH": "/nonexistent"})
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == ['gpuscale: error: --kubeconfig "/nonexistent" is not a readable file']


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("clusters: [\n", "while parsing a flow node expected the node content, but found '<stream end>'"),
        ("- a\n- b\n", "not a kubeconfig (a YAML mapping of clusters, contexts and users)"),
        (
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: prod\n",
            "Invalid kube-config file. Expected object with name prod in",
        ),
    ],
    ids=["not-yaml", "a-list", "no-such-context"],
)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_file_that_is_not_a_kubeconfig_is_one_line_and_exit_2(
    command: str, content: str, why: str, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    run = _run(command, "--kubeconfig", str(path))
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"gpuscale: error: --kubeconfig: cannot load the kubeconfig {path}: {why}"), line
