"""The mock backend: simulated GPUs that follow load patterns, for machines without a GPU.

Each GPU's utilization comes from its pattern, unless a ``DemandSource`` says otherwise (the demo drives
that way as replicas change). Memory, power, temperature and clocks follow utilization plausibly for the
chosen model. Everything is a function of (seed, node, time since ``open``): reproducible for a clock.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import UsageError
from ..model import DeviceInfo, GpuSample, ProcessSample, Vendor
from .errors import DeviceError
from .patterns import Constant, Pattern

__all__ = [
    "MOCK_MODELS",
    "Demand",
    "DemandSource",
    "FileDemand",
    "MockBackend",
    "MockConfig",
    "MockModel",
    "MockProcess",
    "StaticDemand",
    "find_model",
    "mig_layout_problem",
]

MIB = 1024 * 1024
MAX_GPUS = 64  # mock GPUs on one node: more than any server holds (16 on the largest NVIDIA and AMD boards)

# NVIDIA's MIG profiles (the MIG user guide's table for each GPU), each =its memory slices, of 8; its compute
# slices, of 7, are the number before "g". "+me": with the GPU's one set of media engines.
_MIG_80GB = "1g.10gb=1 1g.10gb+me=1 1g.20gb=2 2g.20gb=2 3g.40gb=4 4g.40gb=4 7g.80gb=8"
_MIG_141GB = "1g.18gb=1 1g.18gb+me=1 1g.35gb=2 2g.35gb=2 3g.71gb=4 4g.71gb=4 7g.141gb=8"
_MIG_COMPUTE_SLICES, _MIG_MEMORY_SLICES = 7, 8


@dataclass(frozen=True, slots=True)
class MockModel:
    name: str
    memory_mib: int
    power_limit_watts: float
    idle_watts: float
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float
    vendor: Vendor = Vendor.NVIDIA
    gpm: bool = False  # NVML's GPM activity counters: Hopper and newer
    hbm: bool = False  # NVML reads an HBM temperature (GDDR parts have none)
    mig: str = ""  # its MIG profiles, PROFILE=MEMORY_SLICES, space-separated ("": no MIG)


MOCK_MODELS: Mapping[str, MockModel] = {
    "a100": MockModel("NVIDIA A100-SXM4-80GB", 81920, 400.0, 60.0, 1410.0, 210.0, hbm=True, mig=_MIG_80GB),
    "a10g": MockModel("NVIDIA A10G", 23028, 300.0, 25.0, 1710.0, 210.0),
    "h100": MockModel(
        "NVIDIA H100 80GB HBM3", 81559, 700.0, 70.0, 1980.0, 345.0, gpm=True, hbm=True, mig=_MIG_80GB
    ),
    "h200": MockModel("NVIDIA H200", 143771, 700.0, 75.0, 1980.0, 345.0, gpm=True, hbm=True, mig=_MIG_141GB),
    "l4": MockModel("NVIDIA L4", 23034, 72.0, 16.0, 2040.0, 210.0),
    "mi300x": MockModel("AMD Instinct MI300X", 196592, 750.0, 140.0, 2100.0, 132.0, Vendor.AMD),
}


def find_model(name: str) -> MockModel:
    """A model by short name (``h100``) or full name (``NVIDIA H100 80GB HBM3``), case-insensitive."""
    key = name.strip().lower()
    if key in MOCK_MODELS:
        return MOCK_MODELS[key]
    for model in MOCK_MODELS.values():
        if model.name.lower() == key:
            return model
    raise UsageError(f'mock model "{name}" is unknown; known models: {", ".join(sorted(MOCK_MODELS))}')


def mig_layout_problem(model: MockModel, profiles: Sequence[str]) -> str | None:
    """Why ``profiles`` cannot be the MIG instances of one ``model`` GPU (``None``: they can): a profile the
    model does not have, more compute or memory slices than it has, or more than one ``+me`` instance."""
    if not profiles:
        return None
    if not model.mig:
        with_mig = ", ".join(k for k, m in sorted(MOCK_MODELS.items()) if m.mig)
        return f"the {model.name} has no MIG (models with MIG: {with_mig})"
    memory_slices = {p: int(n) for p, _, n in (s.partition("=") for s in model.mig.split())}
    for profile in profiles:
        if profile not in memory_slices:
            known = ", ".join(memory_slices)
            return f'"{profile}" is not a MIG profile of the {model.name}; its profiles: {known}'
    compute = sum(int(p.partition("g.")[0]) for p in profiles)
    memory = sum(memory_slices[p] for p in profiles)
    if compute > _MIG_COMPUTE_SLICES or memory > _MIG_MEMORY_SLICES:
        return (
            f"{len(profiles)} instances take {compute} compute and {memory} memory slices; "
            f"one {model.name} has {_MIG_COMPUTE_SLICES} and {_MIG_MEMORY_SLICES}"
        )
    if sum(p.endswith("+me") for p in profiles) > 1:
        return "at most one +me instance: a GPU has one set of media engines"
    return None


@dataclass(frozen=True, slots=True)
class MockProcess:
    """A simulated process on a mock GPU, using ``share`` (0-1) of the GPU's load and memory."""

    pid: int
    share: float


@dataclass(frozen=True, slots=True)
class Demand:
    """What a demand source asks of one GPU now: its utilization, and the processes that make it."""

    utilization: float
    processes: tuple[MockProcess, ...] = ()


class DemandSource(Protocol):
    """Something other code drives: the demand on a GPU (by index) now, or ``None`` to follow the pattern."""

    def demand(self, index: int) -> Demand | None: ...


class StaticDemand:
    """An in-process demand source: set and clear demands from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._demands: dict[int, Demand] = {}

    def set(self, index: int, demand: Demand | None) -> None:
        with self._lock:
            if demand is None:
                self._demands.pop(index, None)
            else:
                self._demands[index] = demand

    def demand(self, index: int) -> Demand | None:
        with self._lock:
            return self._demands.get(index)


class FileDemand:
    """A demand source read from a JSON file that another process rewrites (the demo's controller does).

    Format: ``{"gpus": {"0": {"utilization": 70, "processes": [{"pid": 123, "share": 0.5}]}}}``. GPUs not
    listed follow their pattern. The file is re-read when its modification time changes; a missing file means
    no demand; a malformed one keeps the last good demand (the writer replaces it atomically).
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._mtime_ns: int | None = None
        self._demands: dict[int, Demand] = {}

    def _refresh(self) -> None:
        try:
            mtime = os.stat(self._path).st_mtime_ns
        except FileNotFoundError:
            self._mtime_ns, self._demands = None, {}
            return
        if mtime == self._mtime_ns:
            return
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
            demands: dict[int, Demand] = {}
            for key, entry in raw.get("gpus", {}).items():
                procs = tuple(
                    MockProcess(int(p["pid"]), float(p["share"])) for p in entry.get("processes", ())
                )
                demands[int(key)] = Demand(float(entry["utilization"]), procs)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return
        self._mtime_ns, self._demands = mtime, demands

    def demand(self, index: int) -> Demand | None:
        self._refresh()
        return self._demands.get(index)


@dataclass(frozen=True, slots=True)
class MockConfig:
    """How many GPUs, of what model, following which patterns. ``node`` seeds the UUIDs, so two mock nodes
    have different GPUs and a restarted agent has the same ones."""

    gpus: int = 1
    model: MockModel = MOCK_MODELS["h100"]
    seed: int = 0
    patterns: tuple[Pattern, ...] = (Constant(0.0),)
    node: str = "mock"
    processes: Mapping[int, tuple[MockProcess, ...]] = field(default_factory=dict)
    mig_profiles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.gpus <= MAX_GPUS:
            raise UsageError(f'mock GPU count "{self.gpus}" must be from 0 to {MAX_GPUS}')
        problem = mig_layout_problem(self.model, self.mig_profiles)
        if problem is not None:
            raise UsageError(f"mock MIG instances: {problem}")
        if not self.patterns:
            raise UsageError("mock patterns: give at least one pattern")

    def pattern(self, index: int) -> Pattern:
        return self.patterns[min(index, len(self.patterns) - 1)]


def _mock_uuid(prefix: str, node: str, seed: int, *parts: object) -> str:
    name = "/".join(str(p) for p in (node, seed, *parts))
    return f"{prefix}-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, 'gpuscale-mock:' + name)}"


class MockBackend:
    """Simulated GPUs. ``clock`` gives Unix seconds; time since ``open`` drives the patterns."""

    name = "mock"

    def __init__(
        self,
        config: MockConfig,
        *,
        demand: DemandSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._demand = demand
        self._clock = clock
        self._start: float | None = None
        self._devices: tuple[DeviceInfo, ...] = ()
        self._energy: dict[str, tuple[float, float]] = {}  # uuid -> (mJ so far, when): a counter

    def open(self) -> None:
        cfg, model = self._config, self._config.model
        self._start = self._clock()
        devices: list[DeviceInfo] = []
        for i in range(cfg.gpus):
            gpu_uuid = _mock_uuid("GPU", cfg.node, cfg.seed, i)
            bus_id = f"{i // 15:08X}:{0x18 + 0x10 * (i % 15):02X}:00.0"  # 15 GPUs a PCI domain: 0x18..0xF8
            devices.append(
                DeviceInfo(
                    index=i,
                    uuid=gpu_uuid,
                    name=model.name,
                    pci_bus_id=bus_id,
                    memory_total_bytes=model.memory_mib * MIB,
                    power_limit_watts=model.power_limit_watts,
                    vendor=model.vendor,
                    mig_enabled=bool(cfg.mig_profiles) if model.vendor is Vendor.NVIDIA else None,
                    dra_name=f"gpu-{i + 1}-{128 + i}" if model.vendor is Vendor.AMD else None,
                    vendor_labels=_amd_labels(model, i) if model.vendor is Vendor.AMD else (),
                )
            )
            for gi, profile in enumerate(cfg.mig_profiles, start=1):
                _slices, mem = _parse_mig_profile(profile)
                devices.append(
                    DeviceInfo(
                        index=i,
                        uuid=_mock_uuid("MIG", cfg.node, cfg.seed, i, gi),
                        name=f"{model.name} MIG {profile}",
                        pci_bus_id=bus_id,
                        memory_total_bytes=mem,
                        power_limit_watts=None,
                        vendor=model.vendor,
                        mig_enabled=True,
                        parent_uuid=gpu_uuid,
                        mig_profile=profile,
                        gpu_instance_id=gi,
                        compute_instance_id=0,
                    )
                )
        self._devices = tuple(devices)

    def close(self) -> None:
        self._start = None

    def devices(self) -> Sequence[DeviceInfo]:
        return self._devices

    def xid_last(self, uuid: str) -> int | None:
        """Mock NVIDIA GPUs report no XID error (0), as NVML's event set does for healthy ones."""
        nvidia = self._config.model.vendor is Vendor.NVIDIA
        return 0 if nvidia and any(d.uuid == uuid and not d.is_mig for d in self._devices) else None

    def sample(self, device: DeviceInfo) -> GpuSample:
        if self._start is None:
            raise DeviceError(device.uuid, "driver", "the mock backend is not open")
        now = self._clock()
        model = self._config.model
        demand = self._demand.demand(device.index) if self._demand is not None else None
        if demand is not None:
            util, mem_pct, procs = demand.utilization, None, demand.processes
        else:
            point = self._config.pattern(device.index).at(now - self._start)
            util, mem_pct = point.utilization, point.memory_percent
            procs = self._config.processes.get(device.index, ())
        util = min(100.0, max(0.0, util))
        total = device.memory_total_bytes or 0
        if mem_pct is None:
            mem_pct = 1.0 + 0.8 * util  # a loaded model plus working memory that grows with load
        used = int(total * mem_pct / 100.0)
        mig_mode = bool(device.mig_enabled)
        # As NVML: utilization is not supported on MIG instances, nor on a GPU in MIG mode, nor is per-process
        # utilization ("On MIG-enabled GPUs, querying process utilization is not currently supported").
        # GPM counts per GPU, and per MIG instance (not on a GPU in MIG mode as a whole): a busy inference
        # server keeps its SMs less busy than its engine, its tensor pipes less still.
        gpm = model.gpm and (device.is_mig or not mig_mode)
        activity = _activity(util, whole_gpu=not device.is_mig) if gpm else {}
        if device.is_mig:
            return GpuSample(
                uuid=device.uuid,
                timestamp=now,
                memory_used_bytes=used,
                memory_total_bytes=total,
                processes=tuple(ProcessSample(p.pid, int(used * p.share), None) for p in procs),
                **activity,
            )
        power = round(model.idle_watts + (0.95 * model.power_limit_watts - model.idle_watts) * util / 100, 3)
        health: dict[str, Any] = {}
        if model.vendor is Vendor.NVIDIA:  # dcgm-exporter's other default fields, healthy values
            energy, since = self._energy.get(device.uuid, (0.0, now))
            energy += 1000.0 * power * max(0.0, now - since)
            self._energy[device.uuid] = (energy, now)
            health = {
                "memory_temperature_celsius": round(36.0 + 40.0 * util / 100.0, 1) if model.hbm else None,
                "mem_clock_mhz": 2619.0,
                "energy_mj": int(energy),
                "memory_reserved_bytes": 512 * 1024**2,
                "encoder_utilization": 0.0,
                "decoder_utilization": 0.0,
                "pcie_replays": 0,
                "remapped_rows_correctable": 0,
                "remapped_rows_uncorrectable": 0,
                "row_remap_failed": False,
            }
        else:  # an MI300X: junction and edge sensors, socket power
            junction = round(32.0 + 43.0 * util / 100.0, 1)
            health = {
                "junction_temperature_celsius": junction,
                "edge_temperature_celsius": round(junction - 8.0, 1),
                "package_power_watts": power,
            }
        return GpuSample(
            uuid=device.uuid,
            timestamp=now,
            gpu_utilization=None if mig_mode else util,
            memory_utilization=None if mig_mode else round(0.6 * util, 3),
            memory_used_bytes=used,
            memory_total_bytes=total,
            temperature_celsius=round(32.0 + 43.0 * util / 100.0, 1),
            power_watts=power,
            power_limit_watts=model.power_limit_watts,
            sm_clock_mhz=model.max_sm_clock_mhz if util > 0 else model.idle_sm_clock_mhz,
            processes=tuple(
                ProcessSample(p.pid, int(used * p.share), None if mig_mode else round(util * p.share, 3))
                for p in procs
            ),
            **activity,
            **health,
        )


def _amd_labels(model: MockModel, index: int) -> tuple[tuple[str, str], ...]:
    """An unpartitioned GPU on bare metal, as AMD's exporter labels it."""
    return (
        ("card_model", model.name),
        ("serial_number", f"MOCK{index:012d}"),
        ("gpu_partition_id", "0"),
        ("gpu_compute_partition_type", "spx"),
        ("gpu_memory_partition_type", "nps1"),
        ("deployment_mode", "baremetal"),
    )


def _activity(util: float, *, whole_gpu: bool) -> dict[str, Any]:
    """GPM's counters at ``util`` % busy; a whole GPU also moves data over PCIe (an inference server: requests
    in, results out) and NVLink (tensor-parallel all-reduces), in bytes/s."""
    out: dict[str, Any] = {
        "gr_engine_active": util,
        "sm_active": round(0.8 * util, 3),
        "sm_occupancy": round(0.45 * util, 3),
        "tensor_active": round(0.55 * util, 3),
        "dram_active": round(0.35 * util, 3),
    }
    if whole_gpu:
        busy = util / 100
        out.update(pcie_rx_bytes_per_s=round(6e9 * busy), pcie_tx_bytes_per_s=round(1.5e9 * busy))
        out.update(nvlink_rx_bytes_per_s=round(40e9 * busy), nvlink_tx_bytes_per_s=round(40e9 * busy))
    return out


def _parse_mig_profile(profile: str) -> tuple[int, int]:
    """``3g.40gb`` → (3 slices, 40 GiB in bytes)."""
    try:
        g, _, mem = profile.lower().removesuffix("+me").partition("g.")
        slices = int(g)
        gib = int(mem.removesuffix("gb"))
    except ValueError:
        raise UsageError(
            f'MIG profile "{profile}" is malformed; expected SLICESg.MEMORYgb, e.g. 3g.40gb'
        ) from None
    return slices, gib * 1024 * MIB
