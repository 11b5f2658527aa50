"""``gpuscale probe`` as a user runs it: a real process, its output and its exit code."""

from __future__ import annotations

import json
import os
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
