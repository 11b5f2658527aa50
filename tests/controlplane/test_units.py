"""The control plane's pure parts, without building or starting it: the pins read from the wrapper modules,
the cache key, and the PodResources stand-in's GPU allocation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuscale.backends.mock import MockBackend, MockConfig, find_model
from gpuscale.controlplane.build import BINARIES, cache_dir, go_modules_dir, versions
from gpuscale.controlplane.errors import BuildFailed
from gpuscale.controlplane.kubelet import GpuAllocator, mock_gpu_uuids


def test_the_pins_are_read_from_the_wrapper_modules() -> None:
    v = versions(go_modules_dir())
    assert set(v) == {"kubernetes", "etcd", "kwok", "keda"}
    assert all(x.startswith("v") for x in v.values())
    # every staging module follows the Kubernetes version (v1.X.Y -> v0.X.Y), or the build mixes releases
    text = (go_modules_dir() / "k8s" / "go.mod").read_text()
    staging = "v0." + v["kubernetes"].split(".", 1)[1]
    replaces = [line.split() for line in text.splitlines() if "=> k8s.io/" in line]
    assert len(replaces) == 33 and all(r[-1] == staging for r in replaces), replaces
    tools = {b.package for b in BINARIES}
    for module in {b.module for b in BINARIES}:
        mod = (go_modules_dir() / module / "go.mod").read_text()
        assert all(p in mod for p in tools if next(b for b in BINARIES if b.package == p).module == module)


def test_the_cache_key_moves_with_any_pin(tmp_path: Path) -> None:
    copy = tmp_path / "go"
    shutil.copytree(go_modules_dir(), copy)
    before = cache_dir(copy)
    assert before.name.startswith("k8s-v1.36.3-etcd-v3.6.13-kwok-v0.8.0-keda-v2.21.0-")
    gosum = copy / "keda" / "go.sum"
    gosum.write_text(gosum.read_text() + "\n")
    assert cache_dir(copy) != before


def test_a_wrapper_module_without_the_pin_is_named(tmp_path: Path) -> None:
    copy = tmp_path / "go"
    shutil.copytree(go_modules_dir(), copy)
    (copy / "kwok" / "go.mod").write_text("module x\n\ngo 1.26.0\n")
    with pytest.raises(BuildFailed, match=r"kwok/go.mod requires no sigs.k8s.io/kwok"):
        versions(copy)


def test_the_stand_in_hands_out_the_uuids_the_mock_agent_reports() -> None:
    backend = MockBackend(MockConfig(gpus=3, model=find_model("h100"), node="gpu-node-7"))
    backend.open()
    try:
        assert mock_gpu_uuids("gpu-node-7", 3) == tuple(d.uuid for d in backend.devices())
    finally:
        backend.close()


def _pod(uid: str, name: str, gpus: int, phase: str = "Running") -> dict[str, object]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def test_allocations_are_sticky_exclusive_and_freed() -> None:
    alloc = GpuAllocator(["GPU-a", "GPU-b", "GPU-c"])
    alloc.update([_pod("1", "p1", 1), _pod("2", "p2", 2), _pod("3", "cpu-only", 0)])
    held = {name: cs["main"] for _, name, cs in alloc.by_pod.values()}
    assert held == {"p1": ["GPU-a"], "p2": ["GPU-b", "GPU-c"]}
    alloc.update([_pod("2", "p2", 2), _pod("4", "p4", 1)])  # p1 gone: its GPU goes to the newcomer
    held = {name: cs["main"] for _, name, cs in alloc.by_pod.values()}
    assert held == {"p2": ["GPU-b", "GPU-c"], "p4": ["GPU-a"]}
    alloc.update([_pod("2", "p2", 2, phase="Succeeded"), _pod("4", "p4", 1), _pod("5", "p5", 3)])
    held = {name: cs["main"] for _, name, cs in alloc.by_pod.values()}
    assert held == {"p4": ["GPU-a"]}, (
        "a finished pod frees its GPUs; one asking for more than are free gets none"
    )
    (res,) = alloc.pod_resources()
    assert (res.name, list(res.containers[0].devices[0].device_ids)) == ("p4", ["GPU-a"])


def test_a_component_that_fails_to_start_is_named_with_its_log(tmp_path: Path) -> None:
    from gpuscale.controlplane import Binaries, ComponentFailed, ControlPlane

    root = tmp_path / "cache"
    (root / "bin").mkdir(parents=True)
    etcd = root / "bin" / "etcd"
    etcd.write_text("#!/bin/sh\necho 'etcdmain: listen tcp: address already in use' >&2\nexit 1\n")
    etcd.chmod(0o755)
    plane = ControlPlane(Binaries(root, {}), tmp_path / "work", keda=False)
    with pytest.raises(ComponentFailed) as e:
        plane.start()
    assert e.value.name == "etcd"
    assert str(e.value).startswith("etcd exited with code 1; its log is ")
    assert "address already in use" in str(e.value)
    assert plane.processes == []


def test_the_controller_manager_runs_the_daemonset_controller() -> None:
    """A ``helm install`` into the control plane gets its agent DaemonSet's pods (``DESIRED`` = the kwok
    nodes), as in a cluster; every name is one kube-controller-manager knows, where its source is at hand
    (the Go module cache the build fills)."""
    import os
    import re

    from gpuscale.controlplane.launcher import CONTROLLERS

    assert "daemonset-controller" in CONTROLLERS
    kubernetes = versions(go_modules_dir())["kubernetes"]
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    names = cache / f"k8s.io/kubernetes@{kubernetes}/cmd/kube-controller-manager/names/controller_names.go"
    if not names.is_file():
        pytest.skip(f"{names} is not there (the control plane was not built here)")
    known = set(re.findall(r'= "([a-z-]+-controller)"', names.read_text()))
    assert set(CONTROLLERS) <= known, set(CONTROLLERS) - known
