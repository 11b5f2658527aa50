"""A server address another process holds: one line naming the flag and the address, exit 2, no traceback, and
nothing left running (the real CLI in a subprocess)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port some other process listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["agent", "--backend", "mock", "--node-name", "n"], "--metrics-address"),
        (["agent", "--backend", "mock", "--node-name", "n"], "--grpc-address"),
        (["scaler", "--agents", "127.0.0.1:1"], "--metrics-address"),
        (["scaler", "--agents", "127.0.0.1:1"], "--grpc-address"),
    ],
)
def test_an_address_in_use_is_one_clear_line(command: list[str], flag: str, taken: int) -> None:
    other = "--grpc-address" if flag == "--metrics-address" else "--metrics-address"
    argv = [*command, flag, f"127.0.0.1:{taken}", other, f"127.0.0.1:{_free()}"]
    run = subprocess.run(
        [sys.executable, "-m", "gpuscale", "--log-level", "error", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    (ours,) = [line for line in run.stderr.splitlines() if line.startswith("gpuscale:")]
    assert ours.startswith(f"gpuscale: error: {flag} 127.0.0.1:{taken}: cannot listen there (")
    assert ours.endswith("is another process using the port, or is the address not this host's?")
    assert "Traceback" not in run.stderr and "Event loop is closed" not in run.stderr


def test_a_port_another_grpc_server_holds_is_refused_too() -> None:
    """gRPC servers set SO_REUSEPORT by default, so a second one on the same port would bind and take half
    the connections; gpuscale's servers turn it off and refuse the port instead."""
    from concurrent import futures

    import grpc

    other = grpc.server(futures.ThreadPoolExecutor(max_workers=1))  # gRPC's defaults: SO_REUSEPORT on
    port = other.add_insecure_port("127.0.0.1:0")
    other.start()
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuscale",
                "--log-level",
                "error",
                "agent",
                "--backend",
                "mock",
                "--node-name",
                "n",
                "--grpc-address",
                f"127.0.0.1:{port}",
                "--metrics-address",
                f"127.0.0.1:{_free()}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        other.stop(None)
    assert run.returncode == 2, run.stderr
    assert f"gpuscale: error: --grpc-address 127.0.0.1:{port}: cannot listen there" in run.stderr


def test_tls_files_that_are_not_pem_are_said_as_such(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "agent",
            "--backend",
            "mock",
            "--node-name",
            "n",
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    (line,) = [ln for ln in run.stderr.splitlines() if ln.startswith("gpuscale:")]
    assert line.startswith(f"gpuscale: error: --tls-cert {cert} and --tls-key {key}: not a PEM certificate")
