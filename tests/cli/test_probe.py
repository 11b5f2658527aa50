"""``gpuscale probe`` as a user runs it: a real process, its output and its exit code."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

FIELDS = {
    "index",
    "uuid",
    "name",
    "pci_bus_id",
    "memory_total_bytes",
    "power_limit_watts",
    "mig_enabled",
    "parent_uuid",
    "gpu_instance_id",
    "gpu_utilization",
    "memory_utilization",
    "memory_used_bytes",
    "temperature_celsius",
    "power_watts",
    "sm_clock_mhz",
    "sm_active",  # GPM: the mock's H100 has it
    "mem_clock_mhz",
    "processes",
    "timestamp",
}


def gpuscale(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscale", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def test_mock_json_has_every_field() -> None:
    r = gpuscale("probe", "--backend", "mock", "--mock-gpus", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "mock"
    assert len(out["gpus"]) == 2
    for g in out["gpus"]:
        assert FIELDS <= set(g), FIELDS - set(g)
        for f in FIELDS - {"parent_uuid", "gpu_instance_id", "processes"}:
            assert g[f] is not None, f


def test_mock_patterns_drive_readings(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("0,33\n")
    r = gpuscale(
        "probe",
        "--backend",
        "mock",
        "--mock-gpus",
        "4",
        "--json",
        "--mock-pattern",
        f"constant:12,step:70:5:3600,trace:{trace}",
    )
    assert r.returncode == 0, r.stderr
    utils = [g["gpu_utilization"] for g in json.loads(r.stdout)["gpus"]]
    assert utils == [12, 70, 33, 33]


def test_table_output() -> None:
    r = gpuscale(
        "probe",
        "--backend",
        "mock",
        "--mock-gpus",
        "1",
        "--mock-pattern",
        "constant:57",
        env={"COLUMNS": "200"},
    )
    assert r.returncode == 0, r.stderr
    assert "NVIDIA H100 80GB HBM3" in r.stdout and "57 %" in r.stdout


def test_environment_variables_set_defaults() -> None:
    r = gpuscale("probe", "--json", env={"GPUSCALE_BACKEND": "mock", "GPUSCALE_MOCK_GPUS": "3"})
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["gpus"]) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--backend", "cuda"],
            'gpuscale: error: --backend "cuda" is unknown; choose one of amdsmi, auto, mock, nvml',
        ),
        (
            ["--backend", "mock", "--mock-pattern", "sine:1"],
            'gpuscale: error: mock pattern "sine:1" is malformed',
        ),
        (
            ["--backend", "mock", "--mock-gpus", "two"],
            'gpuscale: error: --mock-gpus "two" must be an integer',
        ),
        (["--backend", "mock", "--mock-model", "v100"], 'gpuscale: error: mock model "v100" is unknown'),
        (["--backend", "mock", "--watch", "0"], 'gpuscale: error: --watch "0" must be greater than 0'),
        (["--backend", "mock", "--watch=-1"], 'gpuscale: error: --watch "-1" must be greater than 0'),
        (
            ["--backend", "mock", "--watch", "0.01"],
            'gpuscale: error: --watch "0.01" must be at least 0.1 seconds',
        ),
        (
            ["--backend", "mock", "--watch", "soon"],
            'gpuscale: error: --watch "soon" must be a number of seconds',
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    r = gpuscale("probe", *args)
    assert r.returncode == 2
    assert r.stderr.startswith(message)
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_nvml_without_driver_is_one_line_and_exit_2() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        pass
    else:  # pragma: no cover - on a GPU machine
        pytest.skip("this machine has an NVIDIA driver")
    r = gpuscale("probe", "--backend", "nvml")
    assert r.returncode == 2
    assert r.stderr.startswith("gpuscale: error: nvml backend unavailable: ")
    assert "or run with --backend mock" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_single_probe_of_nvml_has_gpm_activity(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPM activity is measured between two reads: one-shot probe reads once to start the interval."""
    from gpuscale.backends.nvml import NvmlBackend
    from gpuscale.cli.probe import _read_all
    from tests.fakes.pynvml_fake import FakeGpu, make_module

    monkeypatch.setitem(sys.modules, "pynvml", make_module([FakeGpu("GPU-aaaa", gpm={2: 42.0})]))
    backend = NvmlBackend()
    backend.open()
    try:
        (unprimed,) = _read_all(backend)
        assert unprimed["sm_active"] is None  # the backend's first read: no interval yet
        fresh = NvmlBackend()
        fresh.open()
        try:
            (primed,) = _read_all(fresh, prime=True)
            assert primed["sm_active"] == 42.0
        finally:
            fresh.close()
    finally:
        backend.close()


def test_amd_json_has_the_exporters_labels_as_an_object() -> None:
    r = gpuscale("probe", "--backend", "mock", "--mock-model", "mi300x", "--json")
    assert r.returncode == 0, r.stderr
    (g,) = json.loads(r.stdout)["gpus"]
    assert g["vendor_labels"]["gpu_compute_partition_type"] == "spx" and g["dra_name"] == "gpu-1-128"


def _watch_in_a_pipe(*extra: str, frames: int, is_frame: str) -> tuple[list[str], int, str, int]:
    """Run ``probe --watch 0.3`` with stdout a pipe; read lines as they come until ``frames`` lines start with
    ``is_frame``, then SIGTERM it. The lines, the frames seen, the rest of the output, the exit code."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "probe",
            "--backend",
            "mock",
            "--mock-gpus",
            "2",
            "--mock-pattern",
            "constant:37",
            "--watch",
            "0.3",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    seen = 0
    try:
        while seen < frames:
            line = proc.stdout.readline()  # blocks until the child writes: a frame must not wait for the end
            assert line, f"the output ended after {seen} frames: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.rstrip("\n"))
            seen += line.startswith(is_frame)
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    return lines, seen, rest, proc.returncode


@pytest.mark.timeout(60)
def test_watch_in_a_pipe_prints_a_plain_table_per_interval_and_stops_on_sigterm() -> None:
    # three frames read while it still runs: each is written when it is read, not when the command ends
    lines, _, _, code = _watch_in_a_pipe(frames=3, is_frame="gpuscale probe — backend mock — ")
    assert code == 0
    text = "\n".join(lines)
    assert "\x1b[" not in text  # no terminal codes in a pipe
    rows = [line for line in lines if line.startswith("|   0 |") or line.startswith("|   1 |")]
    assert len(rows) >= 4 and all(" 37 % " in r for r in rows)  # each GPU in each frame, readable
    assert all("…" not in line for line in lines)  # as wide as a row needs: no truncated cells


@pytest.mark.timeout(60)
def test_watch_json_in_a_pipe_is_one_object_per_line() -> None:
    lines, _, rest, code = _watch_in_a_pipe("--json", frames=2, is_frame="{")
    assert code == 0
    for line in [*lines, *rest.splitlines()]:
        frame = json.loads(line)
        assert [g["gpu_utilization"] for g in frame["gpus"]] == [37.0, 37.0]


def _identities(gpus: int) -> list[tuple[str, str]]:
    r = gpuscale("probe", "--backend", "mock", "--mock-gpus", str(gpus), "--json")
    assert r.returncode == 0, r.stderr
    return [(g["name"], g["uuid"]) for g in json.loads(r.stdout)["gpus"]]


def test_a_pipe_gets_every_value_whole_whatever_columns_says() -> None:
    # $COLUMNS is exported by many shells: the terminal's width, not the pipe's
    r = gpuscale("probe", "--backend", "mock", "--mock-gpus", "2", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    for name, uuid in _identities(2):
        assert f"| {name} | {uuid} |" in r.stdout, r.stdout
    assert r.stdout.count(" 0.8 / 79.6 GiB |") == 2 and r.stdout.count(" 70 / 700 W |") == 2, r.stdout


def _on_a_terminal(columns: int, *args: str) -> str:
    """``gpuscale probe *args`` with stdout and stderr a terminal ``columns`` wide; what it printed, without
    the terminal's escape codes."""
    import fcntl
    import pty
    import struct
    import termios

    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscale", "probe", *args], stdout=child, stderr=child, env=env
    )
    os.close(child)
    out = b""
    try:
        while chunk := os.read(parent, 65536):
            out += chunk
    except OSError:  # EIO: the child closed the terminal
        pass
    finally:
        os.close(parent)
        assert proc.wait(timeout=30) == 0, out.decode(errors="replace")
    return re.sub(r"\x1b\[[0-9;]*m", "", out.decode()).replace("\r\n", "\n")


def test_a_narrow_terminal_gets_every_value_whole() -> None:
    out = _on_a_terminal(80, "--backend", "mock", "--mock-gpus", "2")
    assert "…" not in out, out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80, out
    for name, uuid in _identities(2):
        assert re.search(rf"^Name +{re.escape(name)} *$", out, re.M), out
        assert re.search(rf"^UUID +{uuid} *$", out, re.M), out
    assert out.count("0.8 / 79.6 GiB") == 2 and out.count("70 / 700 W") == 2, out


def test_a_wide_terminal_gets_the_table() -> None:
    out = _on_a_terminal(200, "--backend", "mock", "--mock-gpus", "2")
    for name, uuid in _identities(2):
        assert f"│ {name} │ {uuid} │" in out, out
