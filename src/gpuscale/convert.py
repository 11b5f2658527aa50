"""The one place that converts between protobuf messages and gpuscale's plain data.

Optional numeric fields map to ``None`` when unset, so "not supported" survives the wire as absent, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ._proto import agent_pb2
from .model import (
    SAMPLE_FIELDS,
    Assignment,
    BucketCounts,
    ContainerRef,
    DeviceInfo,
    EngineSample,
    GpuSample,
    ModelSignals,
    PodInfo,
    ProcessSample,
    Vendor,
)

__all__ = [
    "assignment_from_pb",
    "assignment_to_pb",
    "device_from_pb",
    "device_to_pb",
    "pod_from_pb",
    "pod_to_pb",
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
_ENGINE_FIELDS = (
    "waiting",
    "running",
    "kv_cache_usage",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
    "requests_aborted",
    "queue_time_sum",
    "queue_time_count",
)


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
        for name in _ENGINE_FIELDS:
            value = getattr(m, name)
            if value is not None:
                setattr(model, name, value)
        _histogram_to_pb(m.ttft, model.ttft)
        _histogram_to_pb(m.itl, model.itl)
    return out


def engine_reading_from_pb(m: agent_pb2.EngineReading) -> EngineSample:
    models = tuple(
        ModelSignals(
            model=x.model,
            ttft=_histogram_from_pb(x.ttft),
            itl=_histogram_from_pb(x.itl),
            **{name: _opt(x, name) for name in _ENGINE_FIELDS},
        )
        for x in m.models
    )
    return EngineSample(m.timestamp, m.engine, tuple(sorted(models, key=lambda x: x.model)))
