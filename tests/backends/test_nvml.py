"""The NVML backend against a stand-in ``pynvml`` (the real one runs in scripts/gpu-check on a GPU machine)."""

from __future__ import annotations

import sys
import threading
from typing import Any

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
    mig_instance,
)
from tests.poll import until_sync


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


# -- GPM: activity counters on Hopper and newer --------------------------------------------------------------
SM, GR, OCC, TENSOR, DRAM = 2, 1, 3, 5, 10
PCIE_TX, PCIE_RX, NVLINK_RX, NVLINK_TX = 20, 21, 60, 61  # MiB/s


def test_gpm_activity_is_over_the_interval_since_the_previous_read(monkeypatch: pytest.MonkeyPatch) -> None:
    h200 = FakeGpu("GPU-aaaa", gpm={GR: 90.0, SM: 61.5, OCC: 30.0, TENSOR: 40.0, DRAM: 20.0})
    a100 = FakeGpu("GPU-bbbb", name="NVIDIA A100-SXM4-80GB")  # no GPM
    module = make_module([h200, a100])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    b = opened()
    d_h200, d_a100 = b.devices()
    first = b.sample(d_h200)
    assert (first.sm_active, first.gr_engine_active) == (None, None)  # no interval yet
    h200.gpm = {GR: 95.0, SM: 70.25, OCC: 35.0, TENSOR: 50.0, DRAM: 25.5}
    second = b.sample(d_h200)
    assert (second.gr_engine_active, second.sm_active, second.sm_occupancy) == (95.0, 70.25, 35.0)
    assert (second.tensor_active, second.dram_active) == (50.0, 25.5)
    assert second.gpu_utilization == 37.0  # NVML's own utilization is still read beside it
    h200.gpm = {GR: 101.5, SM: float("nan"), OCC: 35.0}  # NVML may overshoot; a NaN or missing id is no value
    third = b.sample(d_h200)
    assert (third.gr_engine_active, third.sm_active, third.tensor_active, third.sm_occupancy) == (
        100.0,
        None,
        None,
        35.0,
    )
    plain = b.sample(d_a100)
    assert plain.sm_active is None and plain.gpu_utilization == 37.0
    assert module.state["calls"].count("nvmlGpmMetricsGet") == 2
    assert third.pcie_tx_bytes_per_s is None  # not in this interval's GPM values
    h200.gpm = {PCIE_TX: 1500.0, PCIE_RX: 6000.5, NVLINK_RX: 30000.0, NVLINK_TX: -1.0}
    rates = b.sample(d_h200)
    assert (rates.pcie_tx_bytes_per_s, rates.pcie_rx_bytes_per_s) == (1500.0 * 2**20, 6000.5 * 2**20)
    assert rates.nvlink_rx_bytes_per_s == 30000.0 * 2**20 and rates.nvlink_tx_bytes_per_s is None  # < 0: none
    assert rates.sm_active is None and plain.pcie_rx_bytes_per_s is None
    b.close()
    assert module.state["gpm_allocated"] == set()  # both samples of the H200 freed
    assert module.state["gpm_freed"] == 2


def test_gpm_failure_skips_an_interval_and_never_fails_the_read(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu("GPU-aaaa", gpm={SM: 10.0})
    monkeypatch.setitem(sys.modules, "pynvml", make_module([gpu]))
    b = opened()
    (d,) = b.devices()
    b.sample(d)
    assert b.sample(d).sm_active == 10.0
    saved, gpu.gpm = gpu.gpm, None  # the next GPM sample fails (NOT_SUPPORTED)
    failed = b.sample(d)
    assert failed.sm_active is None and failed.gpu_utilization == 37.0
    gpu.gpm = {SM: 20.0}
    assert b.sample(d).sm_active is None  # a new interval starts here
    assert b.sample(d).sm_active == 20.0
    del saved


def test_mig_instances_get_gpm_through_their_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = FakeGpu(
        "GPU-aaaa",
        mig=(1, 1),
        gpm={SM: 99.0},  # the GPU supports GPM; in MIG mode it is read per GPU instance
        unsupported={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetProcessUtilization"},
        mig_devices=[
            mig_instance("MIG-1111", gi=1, slices=3, memory_gb=71, gpm={SM: 80.0, GR: 85.0, PCIE_TX: 9.0}),
            mig_instance("MIG-2222", gi=2, slices=4, memory_gb=71, gpm={SM: 5.0, GR: 6.0}),
        ],
    )
    monkeypatch.setitem(sys.modules, "pynvml", make_module([parent]))
    b = opened()
    gpu, m1, m2 = b.devices()
    assert (m1.parent_uuid, m1.mig_profile, m1.gpu_instance_id) == ("GPU-aaaa", "3g.71gb", 1)
    assert (m2.mig_profile, m2.gpu_instance_id) == ("4g.71gb", 2)
    assert m1.name == "NVIDIA H200"  # the parent's model, as dcgm-exporter's modelName
    for d in (gpu, m1, m2):
        b.sample(d)
    s1, s2, whole = b.sample(m1), b.sample(m2), b.sample(gpu)
    assert (s1.gpu_utilization, s1.sm_active, s1.gr_engine_active) == (None, 80.0, 85.0)
    assert s1.pcie_tx_bytes_per_s is None  # PCIe belongs to the whole GPU: not asked of an instance
    assert (s2.sm_active, s2.gr_engine_active) == (5.0, 6.0)
    assert whole.sm_active is None and whole.gpu_utilization is None  # per instance only, as NVML has it
    assert whole.temperature_celsius == 41.0 and s1.temperature_celsius is None


def test_the_fake_gpm_structures_are_the_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in declares GPM's ctypes structures as the real nvidia-ml-py does (installed with the dev
    extra; loaded from its file, since tests put the stand-in under the name pynvml): same fields, same
    types, same size, so the backend's use of them is what it would be on a GPU."""
    import ctypes
    import importlib.util

    from tests.fakes import pynvml_fake

    found = importlib.util.find_spec("pynvml")
    assert found is not None and found.origin is not None
    spec = importlib.util.spec_from_file_location("pynvml_real", found.origin)
    assert spec is not None and spec.loader is not None
    real = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml_real", real)  # the binding looks itself up there at import
    spec.loader.exec_module(real)
    for name in (
        "c_nvmlGpmMetricsGet_t",
        "c_nvmlGpmMetric_t",
        "c_metricInfo_t",
        "c_nvmlFieldValue_t",
        "c_nvmlValue_t",
    ):
        ours, theirs = getattr(pynvml_fake, name), getattr(real, name)
        assert [f[0] for f in ours._fields_] == [f[0] for f in theirs._fields_], name
        assert ctypes.sizeof(ours) == ctypes.sizeof(theirs), name
    for name in (
        "NVML_GPM_METRICS_GET_VERSION",
        "NVML_GPM_METRIC_MAX",
        "NVML_GPM_METRIC_GRAPHICS_UTIL",
        "NVML_GPM_METRIC_SM_UTIL",
        "NVML_GPM_METRIC_SM_OCCUPANCY",
        "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        "NVML_GPM_METRIC_DRAM_BW_UTIL",
        "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
        "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
        "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
        "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
        "NVML_FI_DEV_MEMORY_TEMP",
        "NVML_VALUE_TYPE_UNSIGNED_INT",
    ):
        assert getattr(pynvml_fake, name) == getattr(real, name), name
    assert ctypes.sizeof(pynvml_fake.c_nvmlGpmSample_t) == ctypes.sizeof(real.c_nvmlGpmSample_t)


def test_mig_profile_is_the_drivers_name_not_a_rounded_memory_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """An A100 80GB's 3g.40gb instance has 39.25 GiB: the profile comes from the instance's name, as
    dcgm-exporter's GPU_I_PROFILE label has it; the attributes only when the name carries none."""
    a100 = "NVIDIA A100-SXM4-80GB"
    parent = FakeGpu(
        "GPU-aaaa",
        name=a100,
        mig=(1, 1),
        mig_devices=[
            mig_instance("MIG-1", gi=1, slices=3, memory_gb=39.25, profile="3g.40gb", parent_name=a100),
            mig_instance("MIG-2", gi=2, slices=1, memory_gb=9.75, profile="1g.10gb+me", parent_name=a100),
            mig_instance("MIG-3", gi=3, slices=2, memory_gb=19.5, parent_name=a100),
        ],
    )
    parent.mig_devices[2].name = "MIG-3"  # a driver that names instances by UUID only
    monkeypatch.setitem(sys.modules, "pynvml", make_module([parent]))
    _, m1, m2, m3 = opened().devices()
    assert (m1.mig_profile, m2.mig_profile) == ("3g.40gb", "1g.10gb+me")
    assert m3.mig_profile == "2g.20gb"  # from the attributes: 2 slices, round(19.5 GiB)


def test_memory_used_leaves_out_what_the_driver_reserves(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's v2 memory info splits total = free + used + reserved (dcgm-exporter's FB_USED / FB_RESERVED);
    v1 counts the reserved memory as used, so an idle GPU read 512 MiB used. v1 only where v2 is missing."""
    idle = FakeGpu("GPU-aaaa", used=0)
    old = FakeGpu("GPU-bbbb", used=0, unsupported={"nvmlDeviceGetMemoryInfo_v2"})
    monkeypatch.setitem(sys.modules, "pynvml", make_module([idle]))
    (d,) = (b := opened()).devices()
    assert b.sample(d).memory_used_bytes == 0
    assert d.memory_total_bytes == idle.total
    monkeypatch.setitem(sys.modules, "pynvml", make_module([old]))
    (d,) = (b := opened()).devices()
    assert b.sample(d).memory_used_bytes == 512 * 1024**2  # an old driver: v1, as before


def test_the_other_dcgm_exporter_fields_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory temperature and clock, energy, codecs, PCIe retries, remapped rows, reserved memory and the
    driver version: dcgm-exporter's default series beyond what scaling uses, for the dashboards and alerts
    built on them."""
    gpu = FakeGpu("GPU-aaaa", remapped_rows=(2, 1, 0, 1))
    old = FakeGpu(
        "GPU-bbbb",
        bus_id="00000000:2A:00.0",
        unsupported={"nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEnergyConsumption"},  # pre-Ampere
        memory_temp=None,  # GDDR: no memory sensor
    )
    monkeypatch.setitem(sys.modules, "pynvml", make_module([gpu, old]))
    b = opened()
    d, d_old = b.devices()
    assert d.driver_version == "550.54.15"
    s = b.sample(d)
    assert (s.mem_clock_mhz, s.sm_clock_mhz, s.energy_mj) == (2619.0, 1980.0, 123_456_789)
    assert (s.encoder_utilization, s.decoder_utilization, s.pcie_replays) == (5.0, 7.0, 3)
    assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable, s.row_remap_failed) == (2, 1, True)
    assert s.memory_reserved_bytes == gpu.reserved
    assert s.memory_temperature_celsius == 48.0
    s_old = b.sample(d_old)
    assert (s_old.energy_mj, s_old.remapped_rows_correctable, s_old.row_remap_failed) == (None, None, None)
    assert s_old.memory_temperature_celsius is None
    assert s_old.pcie_replays == 3


def test_xid_errors_are_followed_and_the_event_thread_stops_at_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """DCGM_FI_DEV_XID_ERRORS, the value of the last XID error: NVML reports them as events, which a thread
    of the backend waits for; the event set is freed only after that thread has stopped."""
    gpu = FakeGpu("GPU-aaaa")
    old = FakeGpu(
        "GPU-bbbb",
        bus_id="00000000:2A:00.0",
        unsupported={"nvmlDeviceGetRegisterEvents", "nvmlDeviceRegisterEvents"},
    )
    module = make_module([gpu, old])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    waits: list[int] = []  # the timeout of each of the thread's waits, in ms
    wait = module.nvmlEventSetWait_v2

    def counted(event_set: object, timeout_ms: int) -> Any:
        waits.append(timeout_ms)
        return wait(event_set, timeout_ms)

    monkeypatch.setattr(module, "nvmlEventSetWait_v2", counted)
    b = opened()
    d, d_old = b.devices()
    assert b.xid_last(d.uuid) == 0 and b.xid_last(d_old.uuid) is None  # none yet; not watchable
    module.raise_xid(gpu, 79)  # "GPU has fallen off the bus"
    until_sync(
        lambda: b.xid_last(d.uuid), 3, "XID 79 from the event thread", interval=0.02, ok=lambda x: x == 79
    )
    b.close()
    assert waits and max(waits) <= 1000  # every wait returns within a second, so close can stop the thread
    assert module.state["event_sets"] == {"created": 1, "freed": 1}  # freed: the thread stopped


def test_xid_survives_a_reopen_and_a_stuck_event_thread_keeps_nvml_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = FakeGpu("GPU-aaaa")
    module = make_module([gpu])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    b = opened()
    (d,) = b.devices()
    module.raise_xid(gpu, 48)
    until_sync(
        lambda: b.xid_last(d.uuid), 3, "XID 48 from the event thread", interval=0.02, ok=lambda x: x == 48
    )
    b.close()
    b.open()  # a driver reload: a new event set, the last XID kept
    assert b.xid_last(d.uuid) == 48
    # A wait that never returns (a hung driver): close must return, and not shut NVML down under the thread.
    hung, release = threading.Event(), threading.Event()

    def stuck(event_set: object, timeout_ms: int) -> None:
        hung.set()
        release.wait()

    monkeypatch.setattr(module, "nvmlEventSetWait_v2", stuck)
    try:
        assert hung.wait(5), "the thread's next wait never began"  # its current wait times out (1 s) first
        inits = module.state["init"]
        b.close()  # returns although the thread never does: a hang here ends at the test's timeout
        assert module.state["init"] == inits  # no nvmlShutdown: the thread is still inside NVML
    finally:
        release.set()


def test_a_gpu_lost_at_open_is_left_out_and_the_others_are_read(
    gpus: list[FakeGpu], caplog: pytest.LogCaptureFixture
) -> None:
    """A GPU that fell off the bus before the agent (re)opened NVML: the node's other GPUs are still listed
    and read; only when none can be read is the backend unavailable (the driver, not a GPU)."""
    gpus[0].fail = NVML_ERROR_GPU_IS_LOST
    b = opened()
    assert [d.uuid for d in b.devices()] == ["GPU-bbbb"]
    assert b.sample(b.devices()[0]).gpu_utilization == 37.0
    assert "1 of 2 GPUs cannot be read and are left out" in caplog.text
    b.close()
    gpus[1].fail = NVML_ERROR_GPU_IS_LOST
    with pytest.raises(BackendUnavailable, match="listing GPUs failed"):
        opened()
