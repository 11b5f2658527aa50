"""Plain data shared by every layer: what a GPU is and what one reading of it says, what an inference
engine's metrics said, and what one message of the agent's Watch stream says of its node.

Units are fixed here, once: percentages 0-100, bytes, watts, degrees Celsius, MHz, Unix seconds.
A field a device does not support is ``None`` (absent), never 0.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Generic, TypeVar

__all__ = [
    "ENGINE_SIGNALS",
    "SAMPLE_FIELDS",
    "Assignment",
    "BucketCounts",
    "ContainerRef",
    "DeviceInfo",
    "DraDevice",
    "EngineMissing",
    "EngineSample",
    "EngineState",
    "GpuRows",
    "GpuSample",
    "GpuState",
    "ModelSignals",
    "NodeUpdate",
    "PodInfo",
    "ProcessSample",
    "SampleRow",
    "SignalKind",
    "Vendor",
    "dra_device_key",
    "engine_signals",
]

# The numeric fields of ``GpuSample`` in one fixed order (a sample's row in the scaler's columns).
SAMPLE_FIELDS = (
    "gpu_utilization",
    "memory_utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_celsius",
    "power_watts",
    "power_limit_watts",
    "sm_clock_mhz",
    "gr_engine_active",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
)


class Vendor(enum.Enum):
    """Whose GPU it is; decides which exporter's metric names describe it."""

    NVIDIA = "nvidia"
    AMD = "amd"


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """A GPU, or a MIG instance of one, as discovered once when a backend opens.

    ``index`` is the driver's index of the physical GPU (for a MIG instance: its parent's).
    MIG instances are devices of their own with ``parent_uuid`` set.
    """

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_bytes: int | None
    power_limit_watts: float | None
    vendor: Vendor = Vendor.NVIDIA
    mig_enabled: bool | None = None
    parent_uuid: str | None = None
    mig_profile: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    driver_version: str | None = None  # dcgm-exporter's DCGM_FI_DRIVER_VERSION label
    # The name its DRA driver publishes it under, where that follows from the device: AMD's gpu.amd.com
    # names a GPU or partition gpu-<DRM card minor>-<DRM render minor>
    dra_name: str | None = None
    # Labels its vendor's exporter puts on every series of it that never change while it is open, beyond
    # those gpuscale derives (AMD's: serial_number, gpu_partition_id, the partition types, deployment_mode,
    # card_model); (name, value) pairs
    vendor_labels: tuple[tuple[str, str], ...] = ()

    @property
    def is_mig(self) -> bool:
        return self.parent_uuid is not None

    @property
    def device_name(self) -> str:
        """The ``device`` label dcgm-exporter uses (``nvidia0``), or ``card0`` style for AMD."""
        prefix = "nvidia" if self.vendor is Vendor.NVIDIA else "card"
        return f"{prefix}{self.index}"


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process using a GPU. ``sm_utilization`` is its share of the GPU's SMs in percent, when known."""

    pid: int
    used_memory_bytes: int | None = None
    sm_utilization: float | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one device, taken at ``timestamp`` (Unix seconds)."""

    uuid: str
    timestamp: float
    gpu_utilization: float | None = None
    memory_utilization: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_mhz: float | None = None
    # Activity counters over the last sampling interval, in % (NVML GPM on Hopper and newer, per GPU and per
    # MIG instance; DCGM's profiling fields report the same as ratios): graphics/compute engine active, SMs
    # with a warp, warps resident of the maximum, tensor pipes active, DRAM interface active.
    gr_engine_active: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    # For the agent's /metrics only (dcgm-exporter's other default series; not streamed to the scaler):
    memory_temperature_celsius: float | None = None  # HBM
    mem_clock_mhz: float | None = None
    energy_mj: int | None = None  # since the driver loaded, a counter
    memory_reserved_bytes: int | None = None  # by the driver and firmware: total = free + used + reserved
    encoder_utilization: float | None = None
    decoder_utilization: float | None = None
    pcie_replays: int | None = None  # a counter
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_failed: bool | None = None
    pcie_tx_bytes_per_s: float | None = None  # over the last sampling interval (GPM)
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None  # all links together
    nvlink_rx_bytes_per_s: float | None = None
    # AMD's exporter names its sensors apart (temperature_celsius is the junction's, else the edge's)
    junction_temperature_celsius: float | None = None
    edge_temperature_celsius: float | None = None
    package_power_watts: float | None = None  # MI3xx socket power (gpu_package_power)
    processes: tuple[ProcessSample, ...] = field(default=())

    @property
    def memory_free_bytes(self) -> int | None:
        """total - used - reserved (NVML's v2 split, dcgm-exporter's FB_FREE)."""
        if self.memory_used_bytes is None or self.memory_total_bytes is None:
            return None
        reserved = self.memory_reserved_bytes or 0
        return max(0, self.memory_total_bytes - self.memory_used_bytes - reserved)

    @property
    def memory_used_percent(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return 100.0 * self.memory_used_bytes / self.memory_total_bytes

    @property
    def power_percent(self) -> float | None:
        if self.power_watts is None or not self.power_limit_watts:
            return None
        return 100.0 * self.power_watts / self.power_limit_watts


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A container of a pod."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class DraDevice:
    """A device of a DRA driver that the kubelet prepared for a container, as PodResources names it, and the
    ResourceClaim (``namespace/name``) it was allocated for."""

    driver: str
    pool: str
    device: str
    claim: str = ""

    @property
    def key(self) -> str:
        return dra_device_key(self.driver, self.pool, self.device)


def dra_device_key(driver: str, pool: str, device: str) -> str:
    """One DRA device of a node: ``driver/pool/device``. Unambiguous: a driver name has no ``/`` and a device
    name is a DNS label; only a pool name may have ``/`` in it."""
    return f"{driver}/{pool}/{device}"


@dataclass(frozen=True, slots=True)
class Assignment:
    """A device the kubelet assigned to a container (PodResources API), as the device plugin named it:
    ``GPU-<uuid>``, ``GPU-<uuid>::<replica>`` (time-slicing/MPS), ``MIG-<uuid>``, ``nvidia0``, a bus id…

    A DRA device (``dra``) has the driver as ``resource_name``; its ``device_id`` is ``pool/device`` as the
    kubelet gives it, and becomes what names the GPU (a UUID, a bus id) once its ResourceSlice is known
    (``agent.attribution.resolve_dra``). ``dra`` stays in the agent: the wire carries the resolved id."""

    container: ContainerRef
    resource_name: str
    device_id: str
    dra: DraDevice | None = None


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod on this node, as the Kubernetes API describes it (only what the scaler needs)."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    # asks for a GPU (a container's limit of a GPU resource, or a ResourceClaim); None: not known
    wants_gpu: bool | None = None
    # only the annotations under gpuscale.io/ and prometheus.io/ (where its engine serves metrics): a pod's
    # other annotations can be large (kubectl's last-applied-configuration) and the agent has no use for them
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)
    ip: str = ""  # status.podIP; "" until the pod has one
    # its Ready condition is True; False while it starts (no Ready condition yet, or not True); None: not
    # known (the API gave it no status; an agent older than the field)
    ready: bool | None = None
    # Unix seconds: scheduled (the PodScheduled condition's lastTransitionTime while True, else the pod's
    # creationTimestamp), and Ready (the Ready condition's lastTransitionTime, only while it is True); None:
    # not known. ready_at - scheduled_at is one observation of the workload's cold start (scaling.coldstart).
    scheduled_at: float | None = None
    ready_at: float | None = None


# ----- inference engines' own signals (read by the agent from each GPU pod's engine, see agent.engines)
@dataclass(frozen=True, slots=True)
class BucketCounts:
    """A histogram as an engine exposes it at one instant: cumulative counts of observations at most each
    upper bound (``bounds`` ascending, the last ``inf``), counted since the engine started. Bounds in the
    engine's unit converted to seconds for latencies."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]

    @property
    def total(self) -> float:
        return self.counts[-1] if self.counts else 0.0


class SignalKind(enum.Enum):
    """What an engine signal is over time, which decides how a window of readings is read."""

    GAUGE = "gauge"  # a level at the instant read (``scaling.engine.gauge``)
    COUNTER = "counter"  # a total since the engine started (``scaling.engine.counter_rate``)
    HISTOGRAM = "histogram"  # cumulative bucket counts since the engine started (``BucketCounts``)


_GAUGE: Mapping[str, SignalKind] = {"signal": SignalKind.GAUGE}
_COUNTER: Mapping[str, SignalKind] = {"signal": SignalKind.COUNTER}
_HISTOGRAM: Mapping[str, SignalKind] = {"signal": SignalKind.HISTOGRAM}


@dataclass(frozen=True, slots=True)
class ModelSignals:
    """One model served by an engine, as one scrape read it. A field the engine does not expose, or exposed
    with a value that cannot be right (NaN, negative, a cache fill over 100 %), is ``None``: absent, never 0.

    ``waiting``/``running``: requests queued / in the running batch; ``kv_cache_usage``: percent 0-100;
    ``ttft``/``itl``: time to first token and inter-token latency histograms (seconds); ``prompt_tokens``/
    ``generation_tokens``: counters since the engine started; ``requests_finished``: requests the engine has
    finished since it started (a counter), from which, with ``waiting`` and ``running``, the requests
    arriving per second follow (finished + growth of those in flight); ``requests_aborted``: of those
    finished, the ones the engine aborted (vLLM's ``finished_reason="abort"``, a request cancelled or timed
    out while waiting or running): finished less aborted is what it served. ``None`` where the finished
    counter holds no aborts (SGLang, TGI and Triton count only the requests they completed).

    Every field but ``model`` is a signal, declared with its ``SignalKind`` (``ENGINE_SIGNALS``): the agent's
    mapping, the wire and the scaling core take the list of signals from here."""

    model: str
    waiting: float | None = field(default=None, metadata=_GAUGE)
    running: float | None = field(default=None, metadata=_GAUGE)
    kv_cache_usage: float | None = field(default=None, metadata=_GAUGE)
    ttft: BucketCounts | None = field(default=None, metadata=_HISTOGRAM)
    itl: BucketCounts | None = field(default=None, metadata=_HISTOGRAM)
    prompt_tokens: float | None = field(default=None, metadata=_COUNTER)
    generation_tokens: float | None = field(default=None, metadata=_COUNTER)
    requests_finished: float | None = field(default=None, metadata=_COUNTER)
    requests_aborted: float | None = field(default=None, metadata=_COUNTER)
    # vLLM's vllm:request_queue_time_seconds (_sum, _count): seconds the requests that left the queue had
    # waited, and how many; by Little's law, waiting over their mean wait is the rate requests join the queue,
    # which holds where the counters miss what clients abandon
    queue_time_sum: float | None = field(default=None, metadata=_COUNTER)
    queue_time_count: float | None = field(default=None, metadata=_COUNTER)


# The engine signals, name -> kind, in the order ``ModelSignals`` declares them: the one list of them. The
# agent's mapping (agent/engines/mapping.py) and the wire (convert.py) follow it. A new signal is a field of
# ``ModelSignals``, of the proto's ``EngineModel``, of ``EngineSpec`` with where each engine exposes it, and
# a name in its kind's ``Literal`` of scaling/engine.py (spelled out for the type checker; a test holds the
# last three to this list).
ENGINE_SIGNALS: Mapping[str, SignalKind] = MappingProxyType(
    {f.name: f.metadata["signal"] for f in fields(ModelSignals) if "signal" in f.metadata}
)


def engine_signals(*kinds: SignalKind) -> tuple[str, ...]:
    """The names of the signals of ``kinds`` (none: all), in ``ENGINE_SIGNALS`` order."""
    return tuple(name for name, kind in ENGINE_SIGNALS.items() if not kinds or kind in kinds)


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One scrape of one pod's inference engine at ``timestamp`` (Unix seconds). ``engine`` is what served it
    (``vllm``, ``sglang``, ``tgi``, ``triton``); ``models`` sorted by name; ``notes`` say why a field that
    engine should have is absent (one line each)."""

    timestamp: float
    engine: str
    models: tuple[ModelSignals, ...]
    notes: tuple[str, ...] = ()

    def model(self, name: str) -> ModelSignals | None:
        for m in self.models:
            if m.model == name:
                return m
        return None


@dataclass(frozen=True, slots=True)
class EngineMissing:
    """A pod whose engine could not be read at ``timestamp``: ``reason`` is one of the results of
    ``gpuscale_agent_engine_scrapes_total`` (``timeout``, ``too_large``, …), ``detail`` one line of why."""

    timestamp: float
    reason: str
    detail: str


# ----- the agent's Watch stream: one message of it (convert.py writes and reads the wire)
@dataclass(frozen=True, slots=True)
class EngineState:
    """One GPU pod's engine in a node update: the readings not sent before (oldest first), and the newest
    failure to read it (``None``: none, or read since)."""

    namespace: str
    pod: str
    readings: tuple[EngineSample, ...] = ()
    missing: EngineMissing | None = None


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU in a node update as the agent sends it: the samples not sent before (oldest first), the
    container of each of their processes that the agent could tell (pid -> container), why its last read
    failed (``error_kind`` one of ``backends.errors.DEVICE_ERROR_KINDS``; ``""``: it did not), and the
    containers it is assigned to."""

    device: DeviceInfo
    samples: tuple[GpuSample, ...] = ()
    owners: Mapping[int, ContainerRef] = field(default_factory=dict, hash=False)
    error_kind: str = ""
    error_message: str = ""
    assignments: tuple[Assignment, ...] = ()


# One sample as the scaler keeps it (a ``SampleRing`` row): its timestamp, its values in ``SAMPLE_FIELDS``
# order as floats (NaN where absent; the GPM fields at the end left out when the sample has none), its
# processes.
SampleRow = tuple[float, tuple[float, ...], tuple[ProcessSample, ...]]


@dataclass(frozen=True, slots=True)
class GpuRows:
    """One GPU in a node update as the scaler reads it: ``GpuState`` with its samples as rows, the owners of
    the newest sample's processes, and of its assignments only the pods, ``(namespace, name)`` each in order
    (a row and a pod key per GPU per message cost a fraction of a ``GpuSample`` and an ``Assignment``)."""

    device: DeviceInfo
    rows: tuple[SampleRow, ...] = ()
    owners: Mapping[int, ContainerRef] = field(default_factory=dict, hash=False)
    error_kind: str = ""
    error_message: str = ""
    holders: tuple[tuple[str, str], ...] = ()


_Gpus = TypeVar("_Gpus", GpuState, GpuRows)


@dataclass(frozen=True)  # no slots: Python 3.11 cannot construct a subscripted slotted generic one
class NodeUpdate(Generic[_Gpus]):
    """One message of the agent's Watch stream: ``NodeUpdate[GpuState]`` as the agent sends it,
    ``NodeUpdate[GpuRows]`` as the scaler reads it. A ``snapshot`` replaces what its reader knew of the node;
    an update adds to it. ``gpus``: those with something new; ``pods`` and ``node_labels``: all the node's,
    sent in a snapshot and when ``pods_changed`` / ``node_labels_changed``; ``complete``: whether the pods
    and assignments sent are the node's whole view (``None``: not said, as in a heartbeat);
    ``engines_supported``: the agent reads engines (said with every message but a heartbeat)."""

    snapshot: bool
    node_name: str
    agent_id: str
    sequence: int
    sent_at: float  # Unix seconds
    interval_seconds: float
    gpus: tuple[_Gpus, ...] = ()
    pods: tuple[PodInfo, ...] = ()
    pods_changed: bool = False
    node_labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    node_labels_changed: bool = False
    complete: bool | None = None
    engines_supported: bool = False
    engines: tuple[EngineState, ...] = ()
