"""``/proc/<pid>/cgroup`` as real nodes write it, read from a fake proc root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuscale.kube.cgroup import CgroupRef, container_of_pid, parse_cgroup

UID = "1b2c3d4e-5f6a-4b8c-9d0e-f1a2b3c4d5e6"
UID_ = UID.replace("-", "_")
CID = "4f2b8c1d9e7a6b5c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c"
STATIC_UID = "d7c9b5e3a1f24c6e8b0d2f4a6c8e0b1d"  # a static pod's UID is its config hash

CASES = {
    "v2 systemd containerd (burstable)": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(UID, CID),
    ),
    "v2 systemd containerd (guaranteed)": (
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(UID, CID),
    ),
    "v2 systemd CRI-O with nested container cgroup": (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope/container\n",
        CgroupRef(UID, CID),
    ),
    "v2 systemd CRI-O conmon": (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-conmon-{CID}.scope\n",
        CgroupRef(UID, None),
    ),
    "v2 cgroupfs (k3s)": (f"0::/kubepods/burstable/pod{UID}/{CID}\n", CgroupRef(UID, CID)),
    "v2 cgroupfs guaranteed": (f"0::/kubepods/pod{UID}/{CID}\n", CgroupRef(UID, CID)),
    "v2 kind node (nested in docker, kubelet.slice)": (
        "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"
        f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice"
        f"/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(UID, CID),
    ),
    "v2 static pod": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(STATIC_UID, CID),
    ),
    "v1 cgroupfs docker": (
        f"12:pids:/kubepods/besteffort/pod{UID}/{CID}\n"
        f"11:memory:/kubepods/besteffort/pod{UID}/{CID}\n"
        f"10:devices:/kubepods/besteffort/pod{UID}/{CID}\n"
        f"4:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{CID}\n"
        f"1:name=systemd:/kubepods/besteffort/pod{UID}/{CID}\n",
        CgroupRef(UID, CID),
    ),
    "v1 systemd docker": (
        f"12:hugetlb:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope\n"
        f"3:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope\n"
        "1:name=systemd:/system.slice/docker.service\n"
        "0::/system.slice/containerd.service\n",
        CgroupRef(UID, CID),
    ),
    "v1 systemd containerd, container line after a pod-only line": (
        f"5:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice\n"
        f"4:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(UID, CID),
    ),
    "pod cgroup only": (f"0::/kubepods/burstable/pod{UID}\n", CgroupRef(UID, None)),
    # Read by an agent in its own private cgroup namespace (cgroup v2 under containerd and CRI-O): relative
    # to the agent's cgroup /kubepods/burstable/pod<agent>/<agent container> (or its systemd equivalent).
    "v2 cgroupfs from a cgroup namespace, same QoS class": (
        f"0::/../../pod{UID}/{CID}\n",
        CgroupRef(UID, CID),
    ),
    "v2 cgroupfs from a cgroup namespace, other QoS class": (
        f"0::/../../../besteffort/pod{UID}/{CID}\n",
        CgroupRef(UID, CID),
    ),
    "v2 cgroupfs from a cgroup namespace, guaranteed pod": (
        f"0::/../../../pod{UID}/{CID}\n",
        CgroupRef(UID, CID),
    ),
    "v2 systemd from a cgroup namespace": (
        f"0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(UID, CID),
    ),
    "host service from a cgroup namespace": (
        "0::/../../../../system.slice/nvidia-persistenced.service\n",
        None,
    ),
    "the agent's own container from its namespace": ("0::/\n", None),
    "host process (systemd service)": ("0::/system.slice/nvidia-persistenced.service\n", None),
    "user session": ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    "private cgroup namespace": ("0::/\n", None),
    "docker container outside Kubernetes": (f"0::/system.slice/docker-{CID}.scope\n", None),
    "pod-like name outside kubepods": (f"0::/system.slice/pod{UID}/{CID}\n", None),
    "empty file": ("", None),
    "garbage": ("not a cgroup line\n", None),
}


@pytest.mark.parametrize(("text", "expected"), list(CASES.values()), ids=list(CASES))
def test_parse_cgroup(text: str, expected: CgroupRef | None) -> None:
    assert parse_cgroup(text) == expected


def test_container_of_pid_reads_proc_root(tmp_path: Path) -> None:
    text, expected = CASES["v2 systemd containerd (burstable)"]
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(text)
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "cgroup").write_text("0::/init.scope\n")
    assert container_of_pid(4242, proc_root=tmp_path) == expected
    assert container_of_pid(1, proc_root=tmp_path) is None
    assert container_of_pid(999, proc_root=tmp_path) is None  # exited


def test_container_of_own_pid_does_not_fail() -> None:
    ref = container_of_pid(os.getpid())
    assert ref is None or ref.pod_uid
