"""The one place that converts between protobuf messages and gpuscale's plain data.

Optional numeric fields map to ``None`` when unset, so "not supported" survives the wire as absent, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._proto import agent_pb2
from .model import Assignment, ContainerRef, DeviceInfo, GpuSample, PodInfo, ProcessSample, Vendor

__all__ = [
    "assignment_from_pb",
    "assignment_to_pb",
    "device_from_pb",
    "device_to_pb",
    "pod_from_pb",
    "pod_to_pb",
    "sample_from_pb",
    "sample_to_pb",
]


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def device_to_pb(d: DeviceInfo) -> agent_pb2.Device:
    m = agent_pb2.Device(
        index=d.index, uuid=d.uuid, name=d.name, pci_bus_id=d.pci_bus_id, vendor=d.vendor.value,
        parent_uuid=d.parent_uuid or "", mig_profile=d.mig_profile or "",
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
        index=m.index, uuid=m.uuid, name=m.name, pci_bus_id=m.pci_bus_id,
        memory_total_bytes=_opt(m, "memory_total_bytes"), power_limit_watts=_opt(m, "power_limit_watts"),
        vendor=Vendor(m.vendor) if m.vendor else Vendor.NVIDIA, mig_enabled=_opt(m, "mig_enabled"),
        parent_uuid=m.parent_uuid or None, mig_profile=m.mig_profile or None,
        gpu_instance_id=_opt(m, "gpu_instance_id"), compute_instance_id=_opt(m, "compute_instance_id"),
    )


_SAMPLE_FIELDS = (
    "gpu_utilization", "memory_utilization", "memory_used_bytes", "memory_total_bytes", "temperature_celsius",
    "power_watts", "power_limit_watts", "sm_clock_mhz",
)


def sample_to_pb(s: GpuSample, owners: Mapping[int, ContainerRef] | None = None) -> agent_pb2.Sample:
    m = agent_pb2.Sample(timestamp=s.timestamp)
    for name in _SAMPLE_FIELDS:
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


def sample_from_pb(uuid: str, m: agent_pb2.Sample) -> tuple[GpuSample, dict[int, ContainerRef]]:
    """The sample, and the container of each of its processes that the agent could tell."""
    owners: dict[int, ContainerRef] = {}
    procs = []
    for p in m.processes:
        procs.append(ProcessSample(p.pid, _opt(p, "used_memory_bytes"), _opt(p, "sm_utilization")))
        if p.pod:
            owners[p.pid] = ContainerRef(p.namespace, p.pod, p.container)
    values = {name: _opt(m, name) for name in _SAMPLE_FIELDS}
    return GpuSample(uuid=uuid, timestamp=m.timestamp, processes=tuple(procs), **values), owners


def assignment_to_pb(a: Assignment) -> agent_pb2.Attribution:
    c = a.container
    return agent_pb2.Attribution(namespace=c.namespace, pod=c.pod, container=c.container,
                                 resource_name=a.resource_name, device_id=a.device_id)


def assignment_from_pb(m: agent_pb2.Attribution) -> Assignment:
    return Assignment(ContainerRef(m.namespace, m.pod, m.container), m.resource_name, m.device_id)


def pod_to_pb(p: PodInfo) -> agent_pb2.Pod:
    return agent_pb2.Pod(namespace=p.namespace, name=p.name, uid=p.uid, labels=dict(p.labels))


def pod_from_pb(m: agent_pb2.Pod) -> PodInfo:
    return PodInfo(m.namespace, m.name, m.uid, dict(m.labels))


def pods_to_pb(pods: Iterable[PodInfo]) -> list[agent_pb2.Pod]:
    return [pod_to_pb(p) for p in pods]
