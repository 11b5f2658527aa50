"""The AMD SMI backend against a stand-in ``amdsmi`` module that follows AMD's documented API."""

from __future__ import annotations

import sys

import pytest

from gpuscale.backends import BackendUnavailable, DeviceError, open_backend
from gpuscale.model import Vendor
from tests.fakes.amdsmi_fake import AMDSMI_STATUS_DRIVER_NOT_LOADED, FakeAmdGpu, make_module


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[FakeAmdGpu]:
    g = [FakeAmdGpu("a1b2-0001"), FakeAmdGpu("a1b2-0002", bdf="0000:8c:00.0")]
    monkeypatch.setitem(sys.modules, "amdsmi", make_module(g))
    return g


def test_discovery_and_units(gpus: list[FakeAmdGpu]) -> None:
    b = open_backend("amdsmi")
    d0, _d1 = b.devices()
    assert (d0.uuid, d0.name, d0.pci_bus_id, d0.vendor) == (
        "a1b2-0001",
        "AMD Instinct MI300X",
        "0000:0c:00.0",
        Vendor.AMD,
    )
    assert d0.memory_total_bytes == 196592 * 1024 * 1024  # MB → bytes
    assert d0.power_limit_watts == 750.0  # µW → W
    s = b.sample(d0)
    assert (s.gpu_utilization, s.memory_utilization) == (55.0, 20.0)
    assert s.memory_used_bytes == 1024 * 1024 * 1024
    assert s.power_watts == 310.0 and s.temperature_celsius == 61.0 and s.sm_clock_mhz == 2100.0


def test_na_values_are_absent(gpus: list[FakeAmdGpu]) -> None:
    gpus[0].gfx = "N/A"
    gpus[0].socket_power = "N/A"
    gpus[0].hotspot = None  # not supported: falls back to the edge sensor
    b = open_backend("amdsmi")
    s = b.sample(b.devices()[0])
    assert s.gpu_utilization is None and s.power_watts is None
    assert s.temperature_celsius == 48.0
    # AMD's exporter names the sensors apart: no junction series from an edge reading
    assert (s.junction_temperature_celsius, s.edge_temperature_celsius) == (None, 48.0)


def test_junction_and_edge_are_both_kept(gpus: list[FakeAmdGpu]) -> None:
    b = open_backend("amdsmi")
    s = b.sample(b.devices()[0])
    assert (s.temperature_celsius, s.junction_temperature_celsius, s.edge_temperature_celsius) == (
        61.0,
        61.0,
        48.0,
    )


def test_millidegrees_are_scaled(gpus: list[FakeAmdGpu]) -> None:
    gpus[0].hotspot = 61000
    b = open_backend("amdsmi")
    assert b.sample(b.devices()[0]).temperature_celsius == 61.0


def test_processes(gpus: list[FakeAmdGpu]) -> None:
    gpus[0].processes = [{"name": "python", "pid": 4242, "mem": 1, "memory_usage": {"vram_mem": 2048}}]
    b = open_backend("amdsmi")
    (p,) = b.sample(b.devices()[0]).processes
    assert (p.pid, p.used_memory_bytes, p.sm_utilization) == (4242, 2048, None)


def test_failed_read_names_device(gpus: list[FakeAmdGpu]) -> None:
    b = open_backend("amdsmi")
    gpus[1].fail = AMDSMI_STATUS_DRIVER_NOT_LOADED
    with pytest.raises(DeviceError) as e:
        b.sample(b.devices()[1])
    assert (e.value.uuid, e.value.kind) == ("a1b2-0002", "driver")
    assert b.sample(b.devices()[0]).gpu_utilization == 55.0


def test_driver_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", make_module([], init_error=AMDSMI_STATUS_DRIVER_NOT_LOADED))
    with pytest.raises(BackendUnavailable, match="this machine needs the amdgpu driver"):
        open_backend("amdsmi")


def test_auto_falls_back_to_amd_when_nvml_is_missing(
    gpus: list[FakeAmdGpu], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as on a machine without nvidia-ml-py
    assert open_backend("auto").name == "amdsmi"


def test_auto_with_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with pytest.raises(BackendUnavailable) as e:
        open_backend("auto")
    assert (
        "no GPU library loaded (nvml: the nvidia-ml-py package is not installed; amdsmi: the amdsmi package"
        in str(e.value)
    )


def test_dra_name_from_the_drm_minors(monkeypatch: pytest.MonkeyPatch) -> None:
    """AMD's DRA driver names a GPU or partition gpu-<card>-<render>: the backend derives the same name, as
    AMD's exporter does, where amdsmi reports the minors (ROCm 6.4+)."""
    gpus = [
        FakeAmdGpu("p0", drm_card=1, drm_render=128),
        FakeAmdGpu("p1", drm_card=1, drm_render=129),  # a CPX partition: same card, its own render node
        FakeAmdGpu("p2", drm_card=2, drm_render=0),  # the library does not know this one's render node
    ]
    monkeypatch.setitem(sys.modules, "amdsmi", make_module(gpus))
    assert [d.dra_name for d in open_backend("amdsmi").devices()] == ["gpu-1-128", "gpu-1-129", None]
    monkeypatch.setitem(sys.modules, "amdsmi", make_module(gpus, enumeration=False))  # amdsmi before 6.4
    assert [d.dra_name for d in open_backend("amdsmi").devices()] == [None, None, None]


def test_labels_as_amds_exporter_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [
        FakeAmdGpu("g0"),
        FakeAmdGpu(
            "g1", compute_partition="CPX", memory_partition="NPS4", partition_id=3, virtualization_mode=3
        ),
        FakeAmdGpu(
            "g2",
            model_number="N/A",
            product_serial="N/A",
            compute_partition=None,
            memory_partition=None,
            market_name="AMD Radeon PRO W7900",
            virtualization_mode=0,
        ),
    ]
    monkeypatch.setitem(sys.modules, "amdsmi", make_module(gpus))
    g0, g1, g2 = (dict(d.vendor_labels) for d in open_backend("amdsmi").devices())
    assert g0 == {
        "card_model": "102-G30211-00",  # the board's part number, as the exporter's card_model
        "serial_number": "692251001124",
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "spx",
        "gpu_memory_partition_type": "nps1",
        "deployment_mode": "baremetal",
    }
    assert (g1["gpu_compute_partition_type"], g1["gpu_memory_partition_type"], g1["gpu_partition_id"]) == (
        "cpx",
        "nps4",
        "3",
    )
    assert g1["deployment_mode"] == "vm_vf"  # a guest on an SR-IOV virtual function
    # a GPU that cannot be partitioned, with no board data, of an unknown mode: the exporter's defaults
    assert g2 == {
        "card_model": "AMD Radeon PRO W7900",
        "serial_number": "",
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "none",
        "gpu_memory_partition_type": "none",
        "deployment_mode": "baremetal",
    }
    # an AMD SMI before ROCm 6.4: the partition id from the KFD info
    monkeypatch.setitem(sys.modules, "amdsmi", make_module(gpus, enumeration=False))
    assert dict(open_backend("amdsmi").devices()[1].vendor_labels)["gpu_partition_id"] == "3"


def test_a_label_call_that_fails_costs_the_label_not_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Some AMD SMI calls need privileges the agent may lack: the GPU is still discovered and read."""
    module = make_module([FakeAmdGpu("g0")])

    def denied(g: object) -> object:
        raise module.AmdSmiLibraryException(10)  # AMDSMI_STATUS_NO_PERM

    for name in (
        "amdsmi_get_gpu_virtualization_mode",
        "amdsmi_get_gpu_board_info",
        "amdsmi_get_gpu_accelerator_partition_profile",
        "amdsmi_get_gpu_enumeration_info",
    ):
        setattr(module, name, denied)
    monkeypatch.setitem(sys.modules, "amdsmi", module)
    b = open_backend("amdsmi")
    (d,) = b.devices()
    labels = dict(d.vendor_labels)
    assert (labels["deployment_mode"], labels["card_model"], labels["serial_number"]) == (
        "baremetal",
        "AMD Instinct MI300X",
        "",
    )
    assert labels["gpu_partition_id"] == "0"  # from the KFD info instead
    assert d.dra_name is None and b.sample(d).gpu_utilization == 55.0
