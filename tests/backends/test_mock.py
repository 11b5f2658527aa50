"""The mock backend: devices, readings that follow the pattern plausibly, demand sources, MIG, determinism."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpuscale.backends import Backend, DeviceError, open_backend
from gpuscale.backends.mock import (
    Demand,
    FileDemand,
    MockBackend,
    MockConfig,
    MockProcess,
    StaticDemand,
    find_model,
)
from gpuscale.backends.patterns import parse_patterns
from gpuscale.errors import UsageError
from gpuscale.model import SAMPLE_FIELDS, Vendor


class FakeClock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(patterns: str = "constant:0", gpus: int = 2, **kw: object) -> tuple[MockBackend, FakeClock]:
    clock = FakeClock()
    cfg = MockConfig(gpus=gpus, patterns=parse_patterns(patterns), **kw)  # type: ignore[arg-type]
    b = MockBackend(cfg, clock=clock)
    b.open()
    return b, clock


def test_is_a_backend() -> None:
    b, _ = make()
    assert isinstance(b, Backend)


def test_devices_have_identity() -> None:
    b, _ = make(gpus=3)
    devs = b.devices()
    assert [d.index for d in devs] == [0, 1, 2]
    assert len({d.uuid for d in devs}) == 3
    assert all(d.uuid.startswith("GPU-") for d in devs)
    assert devs[0].name == "NVIDIA H100 80GB HBM3"
    assert devs[0].memory_total_bytes == 81559 * 1024 * 1024
    assert devs[0].power_limit_watts == 700.0
    assert devs[0].device_name == "nvidia0"
    assert devs[1].pci_bus_id != devs[0].pci_bus_id


def test_uuids_stable_per_node_and_distinct_across_nodes() -> None:
    a, _ = make(node="node-a")
    a2, _ = make(node="node-a")
    b, _ = make(node="node-b")
    assert [d.uuid for d in a.devices()] == [d.uuid for d in a2.devices()]
    assert not {d.uuid for d in a.devices()} & {d.uuid for d in b.devices()}


def test_readings_follow_pattern_and_time() -> None:
    b, clock = make("step:10:90:30,constant:50")
    d0, d1 = b.devices()
    assert b.sample(d0).gpu_utilization == 10
    assert b.sample(d1).gpu_utilization == 50
    clock.t += 31
    s = b.sample(d0)
    assert s.gpu_utilization == 90
    assert s.timestamp == clock.t


def test_other_fields_follow_utilization_plausibly() -> None:
    b, clock = make("ramp:0:100:100", gpus=1)
    (d,) = b.devices()
    idle = b.sample(d)
    clock.t += 100
    busy = b.sample(d)
    assert idle.gpu_utilization == 0 and busy.gpu_utilization == 100
    for field in (
        "memory_used_bytes",
        "power_watts",
        "temperature_celsius",
        "sm_clock_mhz",
        "memory_utilization",
    ):
        assert getattr(busy, field) > getattr(idle, field), field
    assert busy.power_watts is not None and busy.power_watts <= busy.power_limit_watts  # type: ignore[operator]
    assert busy.memory_used_bytes is not None and busy.memory_used_bytes < d.memory_total_bytes  # type: ignore[operator]


def test_every_field_present() -> None:
    b, _ = make("constant:40", gpus=1)
    s = b.sample(b.devices()[0])
    for name in SAMPLE_FIELDS:  # an H100: GPM activity included
        assert getattr(s, name) is not None, name


def test_trace_memory_column_drives_memory(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("0,50,25\n")
    b, _ = make(f"trace:{f}", gpus=1)
    s = b.sample(b.devices()[0])
    assert s.memory_used_percent == pytest.approx(25, abs=0.01)


def test_static_demand_overrides_pattern_and_reports_processes() -> None:
    clock = FakeClock()
    demand = StaticDemand()
    b = MockBackend(MockConfig(gpus=2, patterns=parse_patterns("constant:5")), demand=demand, clock=clock)
    b.open()
    d0, d1 = b.devices()
    demand.set(0, Demand(80.0, (MockProcess(100, 0.25), MockProcess(200, 0.75))))
    s0 = b.sample(d0)
    assert s0.gpu_utilization == 80
    assert [p.pid for p in s0.processes] == [100, 200]
    assert sum(p.sm_utilization or 0 for p in s0.processes) == pytest.approx(80)
    assert b.sample(d1).gpu_utilization == 5
    demand.set(0, None)
    assert b.sample(d0).gpu_utilization == 5


def test_file_demand(tmp_path: Path) -> None:
    path = tmp_path / "demand.json"
    src = FileDemand(path)
    assert src.demand(0) is None
    path.write_text(json.dumps({"gpus": {"1": {"utilization": 64, "processes": [{"pid": 7, "share": 1.0}]}}}))
    d = src.demand(1)
    assert d is not None and d.utilization == 64 and d.processes == (MockProcess(7, 1.0),)
    assert src.demand(0) is None
    # A torn write keeps the last good demand.
    path.write_text("{not json")
    os.utime(path, ns=(1, 1))
    assert src.demand(1) == d
    path.unlink()
    assert src.demand(1) is None


def test_mig_instances_are_devices_with_parent() -> None:
    b, _ = make(gpus=1, mig_profiles=("3g.40gb", "2g.20gb"))
    gpu, m1, m2 = b.devices()
    assert gpu.mig_enabled is True and gpu.parent_uuid is None
    assert m1.parent_uuid == gpu.uuid and m1.uuid.startswith("MIG-")
    assert (m1.mig_profile, m1.gpu_instance_id, m2.gpu_instance_id) == ("3g.40gb", 1, 2)
    assert m1.memory_total_bytes == 40 * 1024**3
    assert b.sample(m1).power_watts is None  # not reported per MIG instance
    # Nor, as with NVML, utilization: per instance, on the GPU in MIG mode, per process.
    assert b.sample(m1).gpu_utilization is None and b.sample(gpu).gpu_utilization is None
    assert b.sample(gpu).memory_utilization is None and b.sample(gpu).power_watts is not None
    # GPM activity (an H100) per GPU instance, not for the GPU in MIG mode as a whole.
    assert b.sample(m1).sm_active is not None and b.sample(gpu).sm_active is None


@pytest.mark.parametrize(("model", "gpm"), [("h100", True), ("h200", True), ("a100", False), ("l4", False)])
def test_gpm_activity_only_on_hopper(model: str, gpm: bool) -> None:
    b, _ = make(gpus=1, model=find_model(model))
    (d,) = b.devices()
    s = b.sample(d)
    fields = (s.gr_engine_active, s.sm_active, s.sm_occupancy, s.tensor_active, s.dram_active)
    assert all(v is not None for v in fields) if gpm else all(v is None for v in fields)


def test_amd_model() -> None:
    b, _ = make(gpus=1, model=find_model("mi300x"))
    (d,) = b.devices()
    assert d.vendor is Vendor.AMD and d.device_name == "card0"


def test_unknown_model() -> None:
    with pytest.raises(UsageError, match='mock model "v100" is unknown; known models: a100, a10g, h100'):
        find_model("v100")


def test_sample_after_close_is_a_device_error() -> None:
    b, _ = make(gpus=1)
    d = b.devices()[0]
    b.close()
    with pytest.raises(DeviceError) as e:
        b.sample(d)
    assert e.value.kind == "driver" and e.value.recoverable_by_reopen


def test_open_backend_by_name() -> None:
    b = open_backend("mock", mock=MockConfig(gpus=4))
    assert b.name == "mock" and len(b.devices()) == 4


def test_open_unknown_backend() -> None:
    with pytest.raises(UsageError, match='backend "cuda" is unknown; choose one of amdsmi, auto, mock, nvml'):
        open_backend("cuda")
