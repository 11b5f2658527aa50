"""Agent Watch messages (``NodeUpdate``) as the tests of ClusterState write them: a snapshot or an update of a
node, its GPUs with a sample each and the pods they are attributed to."""

from __future__ import annotations

import time
from typing import Any

from gpuscale._proto import agent_pb2

SNAP, UPD = agent_pb2.NodeUpdate.SNAPSHOT, agent_pb2.NodeUpdate.UPDATE


def gpu(uuid: str, util: float | None = None, pods: tuple[tuple[str, str], ...] = ()) -> agent_pb2.GpuState:
    """GPU ``uuid``; with ``util``, one sample taken now; attributed to each (namespace, pod) of ``pods``."""
    g = agent_pb2.GpuState(device=agent_pb2.Device(uuid=uuid, name="H100"))
    if util is not None:
        g.samples.add(timestamp=time.time(), gpu_utilization=util)
    for ns, pod in pods:
        g.attributions.add(
            namespace=ns, pod=pod, container="main", resource_name="nvidia.com/gpu", device_id=uuid
        )
    return g


def msg(
    kind: Any,
    node: str,
    gpus: list[agent_pb2.GpuState],
    pods: dict[str, dict[str, str]] | None = None,
    agent: str = "a1",
) -> agent_pb2.NodeUpdate:
    """A ``kind`` (``SNAP`` or ``UPD``) message of ``node``; ``pods``: "namespace/name" to labels."""
    m = agent_pb2.NodeUpdate(kind=kind, node_name=node, agent_id=agent, interval_seconds=1.0, gpus=gpus)
    if pods is not None:
        m.pods_changed = kind == UPD
        for name, labels in pods.items():
            ns, _, pod = name.partition("/")
            m.pods.add(namespace=ns, name=pod, uid=name, labels=labels)
    return m
