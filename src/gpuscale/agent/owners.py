"""Transform: which container each GPU process belongs to.

A process's cgroup (``/proc/<pid>/cgroup``; the agent runs in the host's PID namespace) names its pod UID and
container id; the node's pod list turns the container id into namespace/pod/container. Without a pod list, a
GPU held by exactly one container gives its processes to that container.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from ..kube.cgroup import CgroupRef, container_of_pid
from ..model import ContainerRef, GpuSample
from .state import NodeState

__all__ = ["ContainerLookup", "OwnerResolver"]


class ContainerLookup(Protocol):
    """The node's pods, by container id (the pod watcher implements it)."""

    def container(self, container_id: str) -> ContainerRef | None: ...


class OwnerResolver:
    """Maps GPU processes to containers; remembers pids between rounds (a pid's cgroup does not change)."""

    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        lookup: ContainerLookup | None = None,
        *,
        read_cgroup: Callable[[int, Path], CgroupRef | None] = container_of_pid,
    ) -> None:
        self._proc_root = proc_root
        self._lookup = lookup
        self._read = read_cgroup
        self._cgroups: dict[int, CgroupRef | None] = {}

    def resolve(
        self, state: NodeState, samples: Mapping[str, GpuSample]
    ) -> dict[str, dict[int, ContainerRef]]:
        out: dict[str, dict[int, ContainerRef]] = {}
        live: set[int] = set()
        for uuid, sample in samples.items():
            holders = {a.container for a in state.assignments.get(uuid, ())}
            only = next(iter(holders)) if len(holders) == 1 else None
            owners: dict[int, ContainerRef] = {}
            for p in sample.processes:
                live.add(p.pid)
                ref = self._by_cgroup(p.pid)
                if ref is None:
                    ref = only
                if ref is not None:
                    owners[p.pid] = ref
            out[uuid] = owners
        for pid in set(self._cgroups) - live:
            del self._cgroups[pid]
        return out

    def _by_cgroup(self, pid: int) -> ContainerRef | None:
        if self._lookup is None:
            return None
        if pid not in self._cgroups:
            self._cgroups[pid] = self._read(pid, self._proc_root)
        cg = self._cgroups[pid]
        if cg is None or cg.container_id is None:
            return None
        return self._lookup.container(cg.container_id)
