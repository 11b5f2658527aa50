"""The one place that converts between protobuf messages and gpuscale's plain data.

Optional numeric fields map to ``None`` when unset, so "not supported" survives the wire as absent, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._proto import agent_pb2
from .model import (
    SAMPLE_FIELDS,
    Assignment,
    BucketCounts,
    ContainerRef,
    DeviceInfo,
    EngineMissing,
    EngineSample,
    EngineState,
    GpuRows,
    GpuSample,
    GpuState,
    ModelSignals,
    NodeUpdate,
    PodInfo,
    ProcessSample,
    SampleRow,
    SignalKind,
    Vendor,
    engine_signals,
)

__all__ = [
    "assignment_from_pb",
    "assignment_to_pb",
    "device_from_pb",
    "device_to_pb",
    "engine_reading_from_pb",
    "engine_reading_to_pb",
    "node_update_from_pb",
    "node_update_to_pb",
    "pod_from_pb",
    "pod_to_pb",
    "pods_to_pb",
    "sample_row_from_pb",
    "sample_to_pb",
]


_NAN = math.nan


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def device_to_pb(d: DeviceInfo) -> agent_pb2.Device:
    m = agent_pb2.Device(
        index=d.index,
        uuid=d.uuid,
        name=d.name,
        pci_bus_id=d.pci_bus_id,
        vendor=d.vendor.value,
        parent_uuid=d.parent_uuid or "",
        mig_profile=d.mig_profile or "",
    )
    if d.memory_total_bytes is not None:
        m.memory_total_bytes = d.memory_total_bytes
    if d.power_limit_watts is not None:
        m.power_limit_watts = d.power_limit_watts
    if d.mig_enabled is not None:
        m.mig_enabled = d.mig_enabled
    if d.gpu_instance_id is not None:
        m.gpu_instance_id = d.gpu_instance_id
    if d.compute_instance_id is not None:
        m.compute_instance_id = d.compute_instance_id
    return m


def device_from_pb(m: agent_pb2.Device) -> DeviceInfo:
    return DeviceInfo(
        index=m.index,
        uuid=m.uuid,
        name=m.name,
        pci_bus_id=m.pci_bus_id,
        memory_total_bytes=_opt(m, "memory_total_bytes"),
        power_limit_watts=_opt(m, "power_limit_watts"),
        vendor=Vendor(m.vendor) if m.vendor else Vendor.NVIDIA,
        mig_enabled=_opt(m, "mig_enabled"),
        parent_uuid=m.parent_uuid or None,
        mig_profile=m.mig_profile or None,
        gpu_instance_id=_opt(m, "gpu_instance_id"),
        compute_instance_id=_opt(m, "compute_instance_id"),
    )


def sample_to_pb(s: GpuSample, owners: Mapping[int, ContainerRef] | None = None) -> agent_pb2.Sample:
    m = agent_pb2.Sample(timestamp=s.timestamp)
    for name in SAMPLE_FIELDS:
        v = getattr(s, name)
        if v is not None:
            setattr(m, name, v)
    for p in s.processes:
        pm = m.processes.add(pid=p.pid)
        if p.used_memory_bytes is not None:
            pm.used_memory_bytes = p.used_memory_bytes
        if p.sm_utilization is not None:
            pm.sm_utilization = p.sm_utilization
        ref = owners.get(p.pid) if owners else None
        if ref is not None:
            pm.namespace, pm.pod, pm.container = ref.namespace, ref.pod, ref.container
    return m


def sample_row_from_pb(
    m: agent_pb2.Sample,
) -> tuple[tuple[float, ...], tuple[ProcessSample, ...], dict[int, ContainerRef]]:
    """A sample as the scaler keeps it (a ``SampleRing`` row): the values in ``SAMPLE_FIELDS`` order as
    floats, NaN where absent, the GPM fields at the end left out when the sample has none of them (written
    out field by field: it runs for every sample of every GPU the scaler follows); its processes; and the
    container of each process that the agent could tell."""
    has = m.HasField
    values: tuple[float, ...] = (
        m.gpu_utilization if has("gpu_utilization") else _NAN,
        m.memory_utilization if has("memory_utilization") else _NAN,
        float(m.memory_used_bytes) if has("memory_used_bytes") else _NAN,
        float(m.memory_total_bytes) if has("memory_total_bytes") else _NAN,
        m.temperature_celsius if has("temperature_celsius") else _NAN,
        m.power_watts if has("power_watts") else _NAN,
        m.power_limit_watts if has("power_limit_watts") else _NAN,
        m.sm_clock_mhz if has("sm_clock_mhz") else _NAN,
    )
    # GPM activity: only Hopper and newer send it; a row without it stops at the fields every GPU has
    if (
        has("sm_active")
        or has("gr_engine_active")
        or has("tensor_active")
        or has("sm_occupancy")
        or has("dram_active")
    ):
        values += (
            m.gr_engine_active if has("gr_engine_active") else _NAN,
            m.sm_active if has("sm_active") else _NAN,
            m.sm_occupancy if has("sm_occupancy") else _NAN,
            m.tensor_active if has("tensor_active") else _NAN,
            m.dram_active if has("dram_active") else _NAN,
        )
    if not m.processes:
        return values, (), {}
    owners: dict[int, ContainerRef] = {}
    procs = []
    for p in m.processes:
        procs.append(ProcessSample(p.pid, _opt(p, "used_memory_bytes"), _opt(p, "sm_utilization")))
        if p.pod:
            owners[p.pid] = ContainerRef(p.namespace, p.pod, p.container)
    return values, tuple(procs), owners


def assignment_to_pb(a: Assignment) -> agent_pb2.Attribution:
    c = a.container
    return agent_pb2.Attribution(
        namespace=c.namespace,
        pod=c.pod,
        container=c.container,
        resource_name=a.resource_name,
        device_id=a.device_id,
    )


def assignment_from_pb(m: agent_pb2.Attribution) -> Assignment:
    return Assignment(ContainerRef(m.namespace, m.pod, m.container), m.resource_name, m.device_id)


def pod_to_pb(p: PodInfo) -> agent_pb2.Pod:
    m = agent_pb2.Pod(namespace=p.namespace, name=p.name, uid=p.uid, labels=dict(p.labels))
    if p.wants_gpu is not None:
        m.wants_gpu = p.wants_gpu
    if p.ready is not None:
        m.ready = p.ready
    if p.scheduled_at is not None:
        m.scheduled_at = p.scheduled_at
    if p.ready_at is not None:
        m.ready_at = p.ready_at
    return m


def pod_from_pb(m: agent_pb2.Pod) -> PodInfo:
    """An older agent sets none of ``ready``/``scheduled_at``/``ready_at``: not known."""
    return PodInfo(
        m.namespace,
        m.name,
        m.uid,
        dict(m.labels),
        _opt(m, "wants_gpu"),
        ready=_opt(m, "ready"),
        scheduled_at=_opt(m, "scheduled_at"),
        ready_at=_opt(m, "ready_at"),
    )


def pods_to_pb(pods: Iterable[PodInfo]) -> list[agent_pb2.Pod]:
    return [pod_to_pb(p) for p in pods]


# ----- inference engines
# The signals of ModelSignals (model.ENGINE_SIGNALS): the numbers are optional doubles of EngineModel, the
# histograms Histogram messages of it, each by the same name.
_ENGINE_NUMBERS = engine_signals(SignalKind.GAUGE, SignalKind.COUNTER)
_ENGINE_HISTOGRAMS = engine_signals(SignalKind.HISTOGRAM)


def _histogram_to_pb(h: BucketCounts | None, out: agent_pb2.Histogram) -> None:
    if h is not None:
        out.bounds.extend(h.bounds)
        out.counts.extend(h.counts)


def _histogram_from_pb(m: agent_pb2.Histogram) -> BucketCounts | None:
    if not m.bounds or len(m.bounds) != len(m.counts):
        return None
    return BucketCounts(tuple(m.bounds), tuple(m.counts))


def engine_reading_to_pb(s: EngineSample) -> agent_pb2.EngineReading:
    out = agent_pb2.EngineReading(timestamp=s.timestamp, engine=s.engine)
    for m in s.models:
        model = out.models.add(model=m.model)
        for name in _ENGINE_NUMBERS:
            value = getattr(m, name)
            if value is not None:
                setattr(model, name, value)
        for name in _ENGINE_HISTOGRAMS:
            _histogram_to_pb(getattr(m, name), getattr(model, name))
    return out


def engine_reading_from_pb(m: agent_pb2.EngineReading) -> EngineSample:
    models = []
    for x in m.models:
        values = {name: _opt(x, name) for name in _ENGINE_NUMBERS}
        for name in _ENGINE_HISTOGRAMS:
            values[name] = _histogram_from_pb(getattr(x, name))
        models.append(ModelSignals(model=x.model, **values))
    return EngineSample(m.timestamp, m.engine, tuple(sorted(models, key=lambda x: x.model)))


def _engine_state_to_pb(e: EngineState, out: agent_pb2.EngineState) -> None:
    out.namespace, out.pod = e.namespace, e.pod
    out.readings.extend(engine_reading_to_pb(r) for r in e.readings)
    gone = e.missing
    if gone is not None:
        out.missing_reason, out.missing_detail, out.missing_at = gone.reason, gone.detail, gone.timestamp


def _engine_state_from_pb(m: agent_pb2.EngineState) -> EngineState:
    """A failure without a reason (``missing_reason`` empty) is none."""
    missing = EngineMissing(m.missing_at, m.missing_reason, m.missing_detail) if m.missing_reason else None
    return EngineState(m.namespace, m.pod, tuple(engine_reading_from_pb(r) for r in m.readings), missing)


# ----- the Watch stream
def _gpu_state_to_pb(g: GpuState, out: agent_pb2.GpuState) -> None:
    out.device.CopyFrom(device_to_pb(g.device))
    out.samples.extend(sample_to_pb(s, g.owners) for s in g.samples)
    out.error_kind, out.error_message = g.error_kind, g.error_message
    out.attributions.extend(assignment_to_pb(a) for a in g.assignments)


def _gpu_rows_from_pb(m: agent_pb2.GpuState, device: DeviceInfo) -> GpuRows:
    rows: list[SampleRow] = []
    owners: Mapping[int, ContainerRef] = {}
    for s in m.samples:
        values, processes, owners = sample_row_from_pb(s)
        rows.append((s.timestamp, values, processes))
    holders = tuple((a.namespace, a.pod) for a in m.attributions)
    return GpuRows(device, tuple(rows), owners, m.error_kind, m.error_message, holders)


def node_update_to_pb(u: NodeUpdate[GpuState]) -> agent_pb2.NodeUpdate:
    m = agent_pb2.NodeUpdate(
        kind=agent_pb2.NodeUpdate.SNAPSHOT if u.snapshot else agent_pb2.NodeUpdate.UPDATE,
        node_name=u.node_name,
        agent_id=u.agent_id,
        sequence=u.sequence,
        sent_at=u.sent_at,
        interval_seconds=u.interval_seconds,
    )
    for g in u.gpus:
        _gpu_state_to_pb(g, m.gpus.add())
    m.pods.extend(pods_to_pb(u.pods))
    m.pods_changed = u.pods_changed
    if u.complete is not None:
        m.complete = u.complete
    m.engines_supported = u.engines_supported
    for e in u.engines:
        _engine_state_to_pb(e, m.engines.add())
    m.node_labels.update(u.node_labels)
    m.node_labels_changed = u.node_labels_changed
    return m


def node_update_from_pb(
    m: agent_pb2.NodeUpdate, held: Callable[[str, str], DeviceInfo | None] | None = None
) -> NodeUpdate[GpuRows]:
    """A Watch message as the scaler reads it. ``held(node, uuid)``: the device its reader already holds of
    that GPU of that node, if any. In an UPDATE, a GPU it holds keeps that device and its message's is not
    read: the agent sends every GPU's device with each of its updates, and reading one costs about what the
    rest of its GPU's update does. A SNAPSHOT's devices are all read."""
    snapshot, node = m.kind == agent_pb2.NodeUpdate.SNAPSHOT, m.node_name
    gpus = []
    for g in m.gpus:
        device = None if snapshot or held is None else held(node, g.device.uuid)
        gpus.append(_gpu_rows_from_pb(g, device_from_pb(g.device) if device is None else device))
    return NodeUpdate(
        snapshot,
        node,
        m.agent_id,
        m.sequence,
        m.sent_at,
        m.interval_seconds,
        gpus=tuple(gpus),
        pods=tuple(pod_from_pb(p) for p in m.pods),
        pods_changed=m.pods_changed,
        node_labels=dict(m.node_labels),
        node_labels_changed=m.node_labels_changed,
        complete=_opt(m, "complete"),
        engines_supported=m.engines_supported,
        engines=tuple(_engine_state_from_pb(e) for e in m.engines),
    )
