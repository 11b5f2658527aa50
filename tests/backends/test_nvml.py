"""The NVML backend against a stand-in ``pynvml`` (the real one runs in scripts/gpu-check on a GPU machine)."""

from __future__ import annotations

import sys

import pytest

from gpuscale.backends import BackendUnavailable, DeviceError, open_backend
from gpuscale.backends.nvml import NvmlBackend
from tests.fakes.pynvml_fake import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_TIMEOUT,
    FakeGpu,
    make_module,
)


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[FakeGpu]:
    g = [FakeGpu("GPU-aaaa"), FakeGpu("GPU-bbbb", bus_id="00000000:2A:00.0")]
    monkeypatch.setitem(sys.modules, "pynvml", make_module(g))
    return g


def opened(clock: float = 100.0) -> NvmlBackend:
    b = NvmlBackend(clock=lambda: clock)
    b.open()
    return b


def test_discovery(gpus: list[FakeGpu]) -> None:
    b = opened()
    d0, d1 = b.devices()
    assert (d0.index, d0.uuid, d0.name, d0.pci_bus_id) == (0, "GPU-aaaa", "NVIDIA H200", "00000000:19:00.0")
    assert d0.memory_total_bytes == 143771 * 1024 * 1024
    assert d0.power_limit_watts == 700.0
    assert d0.mig_enabled is False
    assert d1.pci_bus_id == "00000000:2A:00.0"


def test_sample_units(gpus: list[FakeGpu]) -> None:
    b = opened(clock=123.5)
    s = b.sample(b.devices()[0])
    assert s.uuid == "GPU-aaaa" and s.timestamp == 123.5
    assert (s.gpu_utilization, s.memory_utilization) == (37.0, 12.0)
    assert s.memory_used_bytes == 4 * 1024**3 and s.memory_total_bytes == 143771 * 1024 * 1024
    assert s.temperature_celsius == 41.0
    assert s.power_watts == pytest.approx(123.456)  # mW → W
    assert s.power_limit_watts == 700.0
    assert s.sm_clock_mhz == 1980.0
    assert s.processes == ()


def test_not_supported_fields_are_absent_not_zero(gpus: list[FakeGpu]) -> None:
    gpus[0].unsupported = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"}
    gpus[0].mig = None
    b = opened()
    assert b.devices()[0].mig_enabled is None
    s = b.sample(b.devices()[0])
    assert s.power_watts is None and s.temperature_celsius is None
    assert s.gpu_utilization == 37.0


def test_processes_with_sm_utilization(gpus: list[FakeGpu]) -> None:
    gpus[0].processes = [(11, 1024), (22, None)]
    gpus[0].proc_util = [(11, 60, 99_500_000), (11, 70, 99_900_000)]
    b = opened(clock=100.0)
    s = b.sample(b.devices()[0])
    by_pid = {p.pid: p for p in s.processes}
    assert by_pid[11].used_memory_bytes == 1024 and by_pid[11].sm_utilization == 70
    assert by_pid[22].used_memory_bytes is None and by_pid[22].sm_utilization == 0.0
    # The next call asks only for samples newer than the last one seen: none → every process idle.
    s2 = b.sample(b.devices()[0])
    assert {p.pid: p.sm_utilization for p in s2.processes} == {11: 0.0, 22: 0.0}


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (NVML_ERROR_GPU_IS_LOST, "lost"),
        (NVML_ERROR_TIMEOUT, "timeout"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "driver"),
        (999, "unknown"),
    ],
)
def test_failed_read_is_a_device_error_for_that_device_only(
    gpus: list[FakeGpu], code: int, kind: str
) -> None:
    b = opened()
    gpus[0].fail = code
    with pytest.raises(DeviceError) as e:
        b.sample(b.devices()[0])
    assert e.value.kind == kind and e.value.uuid == "GPU-aaaa"
    assert b.sample(b.devices()[1]).gpu_utilization == 37.0


def test_no_driver_is_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_module([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(BackendUnavailable) as e:
        open_backend("nvml")
    assert str(e.value) == (
        "nvml backend unavailable: NVML did not load (NVML Shared Library Not Found); "
        "this machine needs NVIDIA's driver (libnvidia-ml.so.1); or run with --backend mock"
    )


def test_reopen_after_close(gpus: list[FakeGpu]) -> None:
    b = opened()
    dev = b.devices()[0]
    b.close()
    with pytest.raises(DeviceError) as e:
        b.sample(dev)
    assert e.value.kind == "driver"
    b.open()
    assert b.sample(b.devices()[0]).gpu_utilization == 37.0


def test_auto_prefers_nvml(gpus: list[FakeGpu]) -> None:
    assert open_backend("auto").name == "nvml"
