"""Which pod and container a process belongs to, from ``/proc/<pid>/cgroup``.

Each line is ``hierarchy-id:controllers:path`` (cgroup v2 has one line, ``0::path``). The kubelet puts a pod
under a ``kubepods`` cgroup and names it after the pod UID; the runtime names the container's cgroup after the
container id. Both cgroup drivers are understood::

    cgroupfs  /kubepods/burstable/pod1b2c3d4e-5f6a-7b8c-9d0e-f1a2b3c4d5e6/<64 hex>
    systemd   /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f6a_..._d5e6.slice/
              cri-containerd-<64 hex>.scope  (or crio-<id>.scope, docker-<id>.scope, cri-dockerd-<id>.scope)

and so are nestings around them (kind: ``/system.slice/docker-<node>.scope/kubelet.slice/kubelet-kubepods…``)
and below them (CRI-O's ``crio-<id>.scope/container``). CRI-O's ``crio-conmon-<id>.scope`` is the runtime
monitor, not the container: it yields the pod alone.

**Cgroup namespaces.** On cgroup v2, containerd and CRI-O give every container a private cgroup namespace, the
agent's included: even with ``hostPID: true`` it reads other processes' paths relative to its own cgroup, as
``0::/../../pod<uid>/<id>`` (cgroupfs; the ``kubepods`` ancestors are above the namespace's root and not
shown) or ``0::/../../kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope`` (systemd). A path that
climbs out of the reader's namespace (``/..``) is a path from inside a pod, so a ``pod<uid>`` component after
the climb is taken without a visible ``kubepods`` ancestor. A process that sees only ``0::/`` (itself in a
private namespace, read from inside it) is not attributable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupRef", "container_of_pid", "parse_cgroup"]

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
# A pod's cgroup: "pod<uid>" (cgroupfs) or "<prefix>-pod<uid_with_underscores>.slice" (systemd).
_POD = re.compile(rf"(?:pod|.*kubepods.*-pod)({_UID})(?:\.slice)?")
# A container's cgroup: "<64 hex>" (cgroupfs) or "<runtime>-<64 hex>.scope" (systemd).
_CONTAINER = re.compile(r"(?:(?P<runtime>[a-z][a-z0-9-]*)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?")
_NOT_A_CONTAINER = frozenset({"crio-conmon"})


@dataclass(frozen=True, slots=True)
class CgroupRef:
    """A process's pod UID (with dashes) and container id (``None``: in the pod, outside any container)."""

    pod_uid: str
    container_id: str | None


def _parse_path(path: str) -> CgroupRef | None:
    parts = [p for p in path.split("/") if p]
    climbed = 0  # the leading ".." of a path seen from a cgroup namespace
    while climbed < len(parts) and parts[climbed] == "..":
        climbed += 1
    if not climbed and "kubepods" not in path:
        return None
    for i in range(len(parts) - 1, climbed - 1, -1):
        m = _POD.fullmatch(parts[i])
        if m is None or not (climbed or any("kubepods" in p for p in parts[: i + 1])):
            continue
        uid = m.group(1).replace("_", "-")
        container_id = None
        if i + 1 < len(parts) and (c := _CONTAINER.fullmatch(parts[i + 1])) is not None:
            if c.group("runtime") not in _NOT_A_CONTAINER:
                container_id = c.group("id")
        return CgroupRef(pod_uid=uid, container_id=container_id)
    return None


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod and container named by the contents of a ``/proc/<pid>/cgroup`` file, or ``None``.

    With cgroup v1 every hierarchy has a line; the first one naming a container wins, else the first naming a
    pod.
    """
    pod_only: CgroupRef | None = None
    for line in text.splitlines():
        fields = line.strip().split(":", 2)
        if len(fields) != 3:
            continue
        ref = _parse_path(fields[2])
        if ref is None:
            continue
        if ref.container_id is not None:
            return ref
        pod_only = pod_only or ref
    return pod_only


def container_of_pid(pid: int, proc_root: Path = Path("/proc")) -> CgroupRef | None:
    """The pod and container of process ``pid``; ``None`` if it is not in a pod or has exited."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:  # the process exited, or /proc is not the host's
        return None
    return parse_cgroup(text)
