"""NodeResourceSliceWatcher against FakeApiServer, both ways (``connection`` in conftest.py): which GPU each DRA
device of this node is, from the ResourceSlices its drivers publish."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from gpuscale.kube._http import KubeApi
from gpuscale.kube.resourceslices import NodeResourceSliceWatcher, device_identities
from tests.fakes.apiserver import FakeApiServer
from tests.poll import until

from .conftest import noop_sleep, running

NODE = "gpu-node-1"
G0 = "GPU-5f3e1c2a-9b8d-4e7f-a6b5-c4d3e2f1a0b9"
G1 = "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
MIG = "MIG-11111111-2222-5333-8444-555555555555"


def _nvidia(uuid: str, bus: str, **extra: dict[str, object]) -> dict[str, dict[str, object]]:
    """A device's attributes as NVIDIA's DRA driver publishes them (deviceinfo.go)."""
    return {
        "type": {"string": "gpu"},
        "uuid": {"string": uuid},
        "productName": {"string": "NVIDIA H200"},
        "driverVersion": {"version": "580.95.5"},
        "pcieBusID": {"string": bus},
        **extra,
    }


@pytest.fixture
async def watcher(api: KubeApi) -> AsyncIterator[NodeResourceSliceWatcher]:
    async with running(NodeResourceSliceWatcher(api, NODE, sleep=noop_sleep)) as w:
        yield w


async def test_reads_this_nodes_slices_and_follows_them(
    apiserver: FakeApiServer, watcher: NodeResourceSliceWatcher
) -> None:
    apiserver.put_resource_slice(
        f"{NODE}-gpu.nvidia.com-abcde",
        node=NODE,
        driver="gpu.nvidia.com",
        devices={
            "gpu-0": _nvidia(G0, "0000:1a:00.0"),
            "gpu-1-mig-9-4-1": {
                "type": {"string": "mig"},
                "uuid": {"string": MIG},
                "parentUUID": {"string": G1},
            },
        },
    )
    apiserver.put_resource_slice(
        "other-node-gpu.nvidia.com-xyz",
        node="other-node",
        driver="gpu.nvidia.com",
        devices={"gpu-0": _nvidia(G1, "")},
    )
    await asyncio.wait_for(watcher.synced.wait(), 5)
    assert watcher.group_version == "resource.k8s.io/v1"
    assert dict(watcher.devices) == {
        f"gpu.nvidia.com/{NODE}/gpu-0": (G0, "0000:1a:00.0"),
        f"gpu.nvidia.com/{NODE}/gpu-1-mig-9-4-1": (MIG,),
    }
    assert any(
        f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{NODE}" in r
        for r in apiserver.requests
    )
    await until(lambda: apiserver.watch_count == 1)

    # the driver republishes after a MIG reconfiguration, and a second driver's slice appears: both followed
    version = watcher.version
    apiserver.put_resource_slice(
        f"{NODE}-gpu.nvidia.com-abcde", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G0, "")}
    )
    apiserver.put_resource_slice(
        f"{NODE}-gpu.amd.com-1",
        node=NODE,
        driver="gpu.amd.com",
        devices={
            "gpu-0-128": {
                "type": {"string": "amdgpu"},
                "resource.kubernetes.io/pciBusID": {"string": "0000:c1:00.0"},
            }
        },
    )
    await until(lambda: watcher.version >= version + 2)
    assert dict(watcher.devices) == {
        f"gpu.nvidia.com/{NODE}/gpu-0": (G0,),
        f"gpu.amd.com/{NODE}/gpu-0-128": ("0000:c1:00.0",),
    }

    # the driver's slice deleted (its plugin uninstalled): its devices are forgotten
    apiserver.delete_resource_slice(f"{NODE}-gpu.nvidia.com-abcde")
    await until(lambda: f"gpu.nvidia.com/{NODE}/gpu-0" not in watcher.devices)
    assert list(watcher.devices) == [f"gpu.amd.com/{NODE}/gpu-0-128"]


async def test_older_api_versions(apiserver: FakeApiServer, api: KubeApi) -> None:
    # Kubernetes 1.32-1.33: v1beta1 only, where a device's attributes sit under "basic"
    apiserver.serve_dra_versions("v1beta1")
    apiserver.put_resource_slice("s", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G0, "")})
    async with running(NodeResourceSliceWatcher(api, NODE, sleep=noop_sleep)) as w:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert w.group_version == "resource.k8s.io/v1beta1"
        assert dict(w.devices) == {f"gpu.nvidia.com/{NODE}/gpu-0": (G0,)}


async def test_prefers_the_newest_version_served(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.serve_dra_versions("v1beta1", "v1beta2", "v1")
    apiserver.put_resource_slice("s", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G0, "")})
    async with running(NodeResourceSliceWatcher(api, NODE, sleep=noop_sleep)) as w:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert w.group_version == "resource.k8s.io/v1"


@pytest.mark.parametrize("versions", [(), ("v1alpha3",)])
async def test_a_cluster_without_dra_is_said_once_and_looked_at_again(
    apiserver: FakeApiServer, api: KubeApi, versions: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    apiserver.serve_dra_versions(*versions)
    w = NodeResourceSliceWatcher(api, NODE, sleep=noop_sleep)
    with caplog.at_level(logging.INFO, "gpuscale.kube.resourceslices"):
        async with running(w):
            await until(lambda: sum(r.endswith("/apis/resource.k8s.io") for r in apiserver.requests) >= 3)
            assert w.note is not None and "DRA devices are not looked up" in caplog.text
            assert caplog.text.count("DRA devices are not looked up") == 1  # said once, not at every look
            assert dict(w.devices) == {} and w.group_version is None
            # DRA turned on later (a control-plane upgrade): found without restarting the agent
            apiserver.serve_dra_versions("v1")
            apiserver.put_resource_slice(
                "s", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G0, "")}
            )
            await until(lambda: bool(w.devices))
            assert w.note is None and w.group_version == "resource.k8s.io/v1"


async def test_a_version_that_goes_away_is_replaced(
    apiserver: FakeApiServer, watcher: NodeResourceSliceWatcher
) -> None:
    # v1beta1 only, then an upgrade serves v1 and no longer v1beta1: the watch ends and finds v1
    apiserver.serve_dra_versions("v1beta1")
    apiserver.put_resource_slice("s", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G0, "")})
    await until(lambda: watcher.group_version == "resource.k8s.io/v1beta1" and bool(watcher.devices))
    apiserver.serve_dra_versions("v1")
    apiserver.close_watches()
    await until(lambda: watcher.group_version == "resource.k8s.io/v1")
    apiserver.put_resource_slice("s", node=NODE, driver="gpu.nvidia.com", devices={"gpu-1": _nvidia(G1, "")})
    await until(lambda: dict(watcher.devices) == {f"gpu.nvidia.com/{NODE}/gpu-1": (G1,)})


async def test_only_the_newest_generation_of_a_pool_counts(
    apiserver: FakeApiServer, watcher: NodeResourceSliceWatcher
) -> None:
    # A driver republishing its pool: the old generation's slice lingers until deleted, with a stale UUID
    apiserver.put_resource_slice(
        "old", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G1, "")}
    )
    apiserver.put_resource_slice(
        "new", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G0, "")}, generation=2
    )
    apiserver.put_resource_slice(
        "amd", node=NODE, driver="gpu.amd.com", devices={"gpu-0-128": {"pciAddr": {"string": "c1:00.0"}}}
    )
    await until(lambda: len(watcher.devices) == 2)
    assert dict(watcher.devices) == {
        f"gpu.nvidia.com/{NODE}/gpu-0": (G0,),
        f"gpu.amd.com/{NODE}/gpu-0-128": ("c1:00.0",),  # another driver's pool: its own generations
    }


async def test_forbidden_is_retried_until_allowed(apiserver: FakeApiServer, api: KubeApi) -> None:
    # RBAC not granted yet (an older chart): the watcher keeps trying, then reads the slices once it may
    apiserver.put_resource_slice("s", node=NODE, driver="gpu.nvidia.com", devices={"gpu-0": _nvidia(G0, "")})
    apiserver.fail_next = [403, 403, 403]
    async with running(NodeResourceSliceWatcher(api, NODE, sleep=noop_sleep)) as w:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert w.failures == 3
        assert dict(w.devices) == {f"gpu.nvidia.com/{NODE}/gpu-0": (G0,)}


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"uuid": {"string": G0}, "pcieBusID": {"string": "0000:1a:00.0"}}, (G0, "0000:1a:00.0")),
        ({"gpu.nvidia.com/uuid": {"string": G0}}, (G0,)),  # qualified with the driver's own domain
        ({"example.com/uuid": {"string": G0}}, ()),  # another domain's attribute is not the driver's word
        (
            {"resource.kubernetes.io/pciBusID": {"string": "0000:c1:00.0"}, "pciAddr": {"string": "c1:00.0"}},
            ("0000:c1:00.0", "c1:00.0"),
        ),
        # a part of a GPU: its bus id is the parent's, so only its own UUID names it
        (
            {"type": {"string": "mig"}, "uuid": {"string": MIG}, "pcieBusID": {"string": "0000:1a:00.0"}},
            (MIG,),
        ),
        (
            {
                "type": {"string": "mig"},
                "parentUUID": {"string": G1},
                "resource.kubernetes.io/pciBusID": {"string": "0000:1a:00.0"},
            },
            (),
        ),  # dynamic MIG: no UUID until prepared
        (
            {
                "type": {"string": "amdgpu-partition"},
                "resource.kubernetes.io/pciBusID": {"string": "0000:c1:00.0"},
            },
            (),
        ),
        ({"uuid": {"bool": True}}, ()),
        ({"uuid": "GPU-not-a-typed-value"}, ()),
        ({}, ()),
    ],
)
def test_device_identities(attributes: dict[str, object], expected: tuple[str, ...]) -> None:
    assert device_identities({"name": "gpu-0", "attributes": attributes}, "gpu.nvidia.com") == expected
    assert (
        device_identities({"name": "gpu-0", "basic": {"attributes": attributes}}, "gpu.nvidia.com")
        == expected
    )
