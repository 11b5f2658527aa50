"""Export: Prometheus series for every GPU, under the names existing dashboards and adapter rules use.

NVIDIA GPUs get dcgm-exporter's names and labels (``DCGM_FI_DEV_GPU_UTIL{gpu, UUID, pci_bus_id, device,
modelName, Hostname, container, namespace, pod}``), AMD GPUs the AMD device-metrics-exporter's
(``gpu_gfx_activity{gpu_id, card_model, serial_number, gpu_partition_id, gpu_compute_partition_type,
gpu_memory_partition_type, deployment_mode, hostname, …}``). A GPU held by several containers
(time-slicing, MPS) gets one series per container. A GPU whose reads fail keeps its last values (see
``gpuscale_agent_sample_age_seconds``); a GPU never read yields nothing: a failed GPU means fewer samples,
never a failed scrape. Per-container shares of shared GPUs are ``DCGM_CUSTOM_*``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ..model import ContainerRef, DeviceInfo, GpuSample, Vendor
from .state import GpuView, NodeSnapshot

__all__ = ["AgentMetrics", "GpuCollector"]

MIB = 1024 * 1024
MB = 1024 * 1024  # AMD's exporter reports VRAM in MB as AMD SMI gives it (MiB)

Getter = Callable[[GpuSample], float | None]


def _mib(v: int | None) -> float | None:
    return None if v is None else v / MIB


def _ratio(v: float | None) -> float | None:
    """A percentage as DCGM's profiling fields report it: a ratio, 0 to 1."""
    return None if v is None else v / 100.0


# (name, help, getter) — help texts as dcgm-exporter's default-counters.csv has them.
NVIDIA_SERIES: tuple[tuple[str, str, Getter], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda s: s.sm_clock_mhz),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda s: s.temperature_celsius),
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", lambda s: s.memory_temperature_celsius),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda s: s.power_watts),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda s: s.gpu_utilization),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda s: s.memory_utilization),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda s: _mib(s.memory_free_bytes)),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda s: _mib(s.memory_used_bytes)),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda s: s.mem_clock_mhz),
    # dcgm-exporter declares this and the retry and row counters as counters; prometheus_client's text
    # format can only write a counter's TYPE line with _total appended, so they are gauges here: rate()
    # and increase() work the same on them.
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        lambda s: s.energy_mj,
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", lambda s: s.pcie_replays),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda s: s.encoder_utilization),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda s: s.decoder_utilization),
    (
        "DCGM_FI_DEV_FB_RESERVED",
        "Framebuffer memory reserved (in MiB).",
        lambda s: _mib(s.memory_reserved_bytes),
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors",
        lambda s: s.remapped_rows_uncorrectable,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors",
        lambda s: s.remapped_rows_correctable,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed",
        lambda s: None if s.row_remap_failed is None else float(s.row_remap_failed),
    ),
    # DCGM's profiling fields, from NVML's GPM counters (Hopper and newer; per MIG instance too).
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        lambda s: _ratio(s.gr_engine_active),
    ),
    (
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        lambda s: _ratio(s.sm_active),
    ),
    (
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        lambda s: _ratio(s.sm_occupancy),
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        lambda s: _ratio(s.tensor_active),
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        lambda s: _ratio(s.dram_active),
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
        lambda s: s.pcie_tx_bytes_per_s,
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
        "in bytes per second.",
        lambda s: s.pcie_rx_bytes_per_s,
    ),
    (
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, all links, in bytes per second (NVML GPM; a DCGM "
        "profiling field, not in dcgm-exporter's default set).",
        lambda s: s.nvlink_tx_bytes_per_s,
    ),
    (
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, all links, in bytes per second (NVML GPM; a DCGM profiling "
        "field, not in dcgm-exporter's default set).",
        lambda s: s.nvlink_rx_bytes_per_s,
    ),
)

_XID = "DCGM_FI_DEV_XID_ERRORS"  # the last XID, read live from the backend (``xid_of``)

# A GPU in MIG mode: its GPU instances carry memory, utilization and activity (dcgm-exporter monitors "all
# GPU instances in MIG mode"); the GPU itself only what no instance has, so that no sum counts memory twice.
_PER_INSTANCE = frozenset(
    {
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
    }
)
MIG_PARENT_SERIES = tuple(
    s for s in NVIDIA_SERIES if s[0] not in _PER_INSTANCE and not s[0].startswith("DCGM_FI_PROF_")
)

AMD_SERIES: tuple[tuple[str, str, Getter], ...] = (
    ("gpu_gfx_activity", "Graphics engine usage in Percentage (0-100)", lambda s: s.gpu_utilization),
    ("gpu_umc_activity", "Memory engine usage in Percentage (0-100)", lambda s: s.memory_utilization),
    ("gpu_used_vram", "Used VRAM memory of the GPU (in MB)", lambda s: _mib(s.memory_used_bytes)),
    ("gpu_free_vram", "Free VRAM memory of the GPU (in MB)", lambda s: _mib(s.memory_free_bytes)),
    ("gpu_total_vram", "Total VRAM memory of the GPU (in MB)", lambda s: _mib(s.memory_total_bytes)),
    (
        "gpu_junction_temperature",
        "Current junction/hotspot temperature in Celsius",
        lambda s: s.junction_temperature_celsius,
    ),
    ("gpu_edge_temperature", "Current edge temperature in Celsius", lambda s: s.edge_temperature_celsius),
    ("gpu_power_usage", "GPU Power usage in Watts", lambda s: s.power_watts),
    ("gpu_package_power", "Current socket power in Watts", lambda s: s.package_power_watts),
)

CONTAINER_SERIES = (
    ("DCGM_CUSTOM_PROCESS_SM_UTIL", "SM utilization of the container's processes on this GPU (in %)."),
    ("DCGM_CUSTOM_PROCESS_MEM_USED", "GPU memory used by the container's processes on this GPU (in MiB)."),
    ("DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED", "GPU memory allocated to the container on this GPU (in MiB)."),
    ("DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO", "GPU memory used by the container over its allocation (0-1)."),
)


@dataclass(frozen=True, slots=True)
class ContainerShare:
    """One container's own use of one GPU, summed over its processes (``None``: not known)."""

    container: ContainerRef
    sm_utilization: float | None
    memory_used_bytes: int | None
    memory_allocated_bytes: int | None


def container_shares(view: GpuView) -> list[ContainerShare]:
    """Per-container figures of a GPU: its processes grouped by container; the GPU's memory divided evenly
    among the containers the kubelet assigned it to (the allocation of a time-sliced replica)."""
    s = view.latest
    if s is None:
        return []
    holders = sorted({a.container for a in view.assignments}, key=lambda c: (c.namespace, c.pod, c.container))
    total = s.memory_total_bytes or view.device.memory_total_bytes
    alloc = None if total is None or not holders else total // len(holders)
    sm: dict[ContainerRef, float | None] = {c: None for c in holders}
    mem: dict[ContainerRef, int | None] = {c: None for c in holders}
    for p in s.processes:
        ref = view.owners.get(p.pid)
        if ref is None:
            continue
        if p.sm_utilization is not None:
            sm[ref] = (sm.get(ref) or 0.0) + p.sm_utilization
        else:
            sm.setdefault(ref, None)
        mem[ref] = (mem.get(ref) or 0) + (p.used_memory_bytes or 0)
    # Every process on the GPU is accounted for: a holder with none of them uses 0. When some process is
    # not attributed (yet: no cgroup tells), a holder without one is unknown, never a made-up 0.
    accounted = all(p.pid in view.owners for p in s.processes)
    if accounted:
        mem = {c: (0 if v is None else v) for c, v in mem.items()}
    if s.processes and accounted and all(p.sm_utilization is not None for p in s.processes):
        sm = {c: (0.0 if v is None else v) for c, v in sm.items()}
    return [ContainerShare(c, sm[c], mem.get(c), alloc if c in holders else None) for c in sm]


class AgentMetrics:
    """The ``gpuscale_agent_*`` series about the agent itself, registered on the agent's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.samples = Counter("gpuscale_agent_samples", "GPU reads that succeeded.", registry=registry)
        self.read_errors = Counter(
            "gpuscale_agent_read_errors",
            "GPU reads that failed, by GPU and kind.",
            ["gpu", "UUID", "kind"],
            registry=registry,
        )
        self.round_duration = Histogram(
            "gpuscale_agent_sample_duration_seconds",
            "Time to read every GPU once.",
            registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.attribution_refreshes = Counter(
            "gpuscale_agent_attribution_refreshes",
            "Refreshes of GPU-to-pod attribution from the kubelet, by result.",
            ["result"],
            registry=registry,
        )
        self.backend_reopens = Counter(
            "gpuscale_agent_backend_reopens", "Times the GPU backend was re-opened.", registry=registry
        )
        self.watch_streams = Gauge("gpuscale_agent_watch_streams", "Open Watch streams.", registry=registry)
        self.pod_watch_errors = Counter(
            "gpuscale_agent_pod_watch_errors",
            "Errors watching this node's pods in the Kubernetes API.",
            registry=registry,
        )


class GpuCollector(Collector):
    """Yields the GPU series from the latest ``NodeSnapshot``, read at scrape time (never the driver)."""

    def __init__(
        self,
        snapshot: Callable[[], NodeSnapshot],
        *,
        hostname_label: str = "Hostname",
        backend: str = "",
        clock: Callable[[], float] = time.time,
        xid_of: Callable[[str], int | None] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._host = hostname_label
        self._backend = backend
        self._clock = clock
        # the last XID of a GPU, live (a GPU that fell off the bus has no sample after its XID)
        self._xid_of = xid_of

    def describe(self) -> Iterable[Metric]:
        return []  # series vary with the node: skip the registry's describe-time collection

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        now = self._clock()
        families = {name: Metric(name, doc, "gauge") for name, doc, _ in (*NVIDIA_SERIES, *AMD_SERIES)}
        # Not from a sample: a GPU that fell off the bus (XID 79) has none after its XID.
        xids = Metric(_XID, "Value of the last XID error encountered.", "gauge")
        containers = {name: Metric(name, doc, "gauge") for name, doc in CONTAINER_SERIES}
        up = Metric("gpuscale_agent_gpu_up", "1 if the last read of the GPU succeeded, else 0.", "gauge")
        age = Metric(
            "gpuscale_agent_sample_age_seconds", "Age of the newest good sample of the GPU.", "gauge"
        )
        # Compute instances of one GPU instance share its memory and GPM counters, and dcgm-exporter's
        # labels (GPU_I_ID) cannot tell them apart: one series per GPU instance, held by the pods of all.
        holders: dict[tuple[str | None, int | None], set[ContainerRef]] = {}
        with_instances: set[str] = set()  # GPUs in MIG mode whose instances report: the GPU keeps the rest
        for view in snap.gpus:
            d = view.device
            if d.is_mig:
                key = (d.parent_uuid, d.gpu_instance_id)
                holders.setdefault(key, set()).update(a.container for a in view.assignments)
                if view.latest is not None and d.parent_uuid is not None:
                    with_instances.add(d.parent_uuid)
        emitted: set[tuple[str | None, int | None]] = set()
        for view in snap.gpus:
            d = view.device
            ident = {"gpu": str(d.index), "UUID": d.uuid}
            whose = {**ident, self._node_label(d): snap.node_name}
            up.add_sample(up.name, whose, 0.0 if view.error is not None or view.latest is None else 1.0)
            if view.latest is None:
                continue
            age.add_sample(age.name, whose, max(0.0, now - view.latest.timestamp))
            held = None
            if d.is_mig:
                key = (d.parent_uuid, d.gpu_instance_id)
                held = holders.get(key, set())
                first = key not in emitted
                emitted.add(key)
            else:
                first = True
            if d.vendor is not Vendor.NVIDIA:
                series = AMD_SERIES
            elif d.mig_enabled and not d.is_mig and d.uuid in with_instances:
                series = MIG_PARENT_SERIES
            else:
                series = NVIDIA_SERIES
            xid = self._xid_of(d.uuid) if self._xid_of is not None and not d.is_mig else None
            for labels in self._label_sets(view, snap.node_name, held) if first else ():
                for name, _, get in series:
                    value = get(view.latest)
                    if value is not None:
                        families[name].add_sample(name, labels, value)
                if xid is not None:
                    xids.add_sample(_XID, labels, xid)
            for share in container_shares(view):
                c = share.container
                labels = {
                    **ident,
                    "NamespaceName": c.namespace,
                    "PodName": c.pod,
                    "ContainerName": c.container,
                    "NodeName": snap.node_name,
                }
                used, allocated = share.memory_used_bytes, share.memory_allocated_bytes
                values = (
                    share.sm_utilization,
                    None if used is None else used / MIB,
                    None if allocated is None else allocated / MIB,
                    None if used is None or not allocated else used / allocated,
                )
                for (name, _), value in zip(CONTAINER_SERIES, values, strict=True):
                    if value is not None:
                        containers[name].add_sample(name, labels, value)
        yield from (m for m in (*families.values(), xids) if m.samples)
        yield from (m for m in containers.values() if m.samples)
        yield up
        yield age

    def _node_label(self, d: DeviceInfo) -> str:
        """The label naming the node on a GPU's series: dcgm-exporter's (configurable) or AMD's."""
        return self._host if d.vendor is Vendor.NVIDIA else "hostname"

    def _label_sets(
        self, view: GpuView, node: str, held: set[ContainerRef] | None = None
    ) -> list[dict[str, str]]:
        """One label set per container holding the GPU (``held``: for a GPU instance, the holders of all
        its compute instances), or one without pod labels."""
        d = view.device
        if d.vendor is Vendor.NVIDIA:
            base = {
                "gpu": str(d.index),
                "UUID": d.parent_uuid or d.uuid,
                "pci_bus_id": d.pci_bus_id,
                "device": d.device_name,
                "modelName": d.name,
            }
            if d.is_mig:
                base["GPU_I_PROFILE"] = d.mig_profile or ""
                base["GPU_I_ID"] = "" if d.gpu_instance_id is None else str(d.gpu_instance_id)
            base[self._node_label(d)] = node
            if d.driver_version:
                base["DCGM_FI_DRIVER_VERSION"] = d.driver_version
        else:
            base = {"gpu_id": str(d.index), "gpu_uuid": d.uuid, "card_model": d.name}
            base[self._node_label(d)] = node
            base.update(d.vendor_labels)
        holders = sorted(
            held if held is not None else {a.container for a in view.assignments},
            key=lambda c: (c.namespace, c.pod, c.container),
        )
        if not holders:
            return [base]
        return [{**base, "container": c.container, "namespace": c.namespace, "pod": c.pod} for c in holders]
