"""PodResourcesClient against FakeKubelet over a real unix socket."""

from __future__ import annotations

import grpc
import pytest

from gpuscale._proto import podresources_pb2
from gpuscale.kube.errors import KubeletError, KubeletUnavailable
from gpuscale.kube.podresources import (
    PodResourcesClient,
    assignments_from_response,
    is_gpu_driver,
    is_gpu_resource,
)
from gpuscale.model import Assignment, ContainerRef, DraDevice
from tests.fakes.kubelet import FakeKubelet, dra_claim, pod_resources

UUID0 = "GPU-5f3e1c2a-9b8d-4e7f-a6b5-c4d3e2f1a0b9"
UUID1 = "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/mig-3g.71gb", True),
        ("amd.com/gpu", True),
        ("amd.com/xcp", True),
        ("nvidia.com/gpu.shared", False),
        ("nvidia.com/gpus", False),
        ("example.com/nic", False),
        ("cpu", False),
    ],
)
def test_resource_filter(name: str, expected: bool) -> None:
    assert is_gpu_resource(name) is expected


def test_extra_resource_names() -> None:
    assert is_gpu_resource("nvidia.com/gpu.shared", {"nvidia.com/gpu.shared"})


def test_conversion_keeps_order_and_filters() -> None:
    response = podresources_pb2.ListPodResourcesResponse(
        pod_resources=[
            pod_resources(
                "ml",
                "trainer-0",
                {
                    "main": [("nvidia.com/gpu", [UUID0, UUID1]), ("example.com/nic", ["eth1"])],
                    "sidecar": [],
                },
            ),
            pod_resources("ml", "infer-0", {"server": [("nvidia.com/gpu.shared", [f"{UUID0}::3"])]}),
        ]
    )
    main = ContainerRef("ml", "trainer-0", "main")
    assert assignments_from_response(response) == (
        Assignment(main, "nvidia.com/gpu", UUID0),
        Assignment(main, "nvidia.com/gpu", UUID1),
    )
    shared = assignments_from_response(response, {"nvidia.com/gpu.shared"})
    assert shared[-1] == Assignment(
        ContainerRef("ml", "infer-0", "server"), "nvidia.com/gpu.shared", f"{UUID0}::3"
    )


async def test_list_over_unix_socket(kubelet: FakeKubelet) -> None:
    kubelet.pods = [
        pod_resources("default", "a", {"c": [("nvidia.com/gpu", [UUID0])]}),
        pod_resources("default", "b", {"c": [("nvidia.com/mig-1g.10gb", ["MIG-1234"])]}),
        pod_resources("default", "c", {"c": [("amd.com/gpu", ["0000:c1:00.0"])]}),
        pod_resources("default", "d", {"c": [("example.com/fpga", ["x"])]}),
    ]
    kubelet.allocatable = [
        podresources_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[UUID0, UUID1]),
        podresources_pb2.ContainerDevices(resource_name="example.com/fpga", device_ids=["x"]),
    ]
    async with PodResourcesClient(str(kubelet.socket_path)) as client:
        got = await client.list()
        assert [(a.container.pod, a.device_id) for a in got] == [
            ("a", UUID0),
            ("b", "MIG-1234"),
            ("c", "0000:c1:00.0"),
        ]
        assert await client.allocatable() == (("nvidia.com/gpu", UUID0), ("nvidia.com/gpu", UUID1))
        kubelet.pods = []
        assert await client.list() == ()


async def test_socket_disappears_and_comes_back(kubelet: FakeKubelet) -> None:
    kubelet.pods = [pod_resources("ns", "p", {"c": [("nvidia.com/gpu", [UUID0])]})]
    client = PodResourcesClient(str(kubelet.socket_path), timeout=2.0)
    try:
        assert len(await client.list()) == 1
        await kubelet.stop()
        assert not kubelet.socket_path.exists()
        with pytest.raises(KubeletUnavailable, match="socket not found") as info:
            await client.list()
        assert info.value.code == "UNAVAILABLE"
        await kubelet.start()
        kubelet.pods.append(pod_resources("ns", "q", {"c": [("nvidia.com/gpu", [UUID1])]}))
        assert [a.container.pod for a in await client.list()] == ["p", "q"]
        # A restart between two calls (new socket file, same path) costs no failed call.
        await kubelet.restart()
        assert len(await client.list()) == 2
    finally:
        await client.close()


async def test_socket_present_but_nobody_listening(kubelet: FakeKubelet) -> None:
    await kubelet.stop()
    kubelet.socket_path.touch()  # a stale file where the socket was
    async with PodResourcesClient(str(kubelet.socket_path), timeout=2.0) as client:
        with pytest.raises(KubeletUnavailable) as info:
            await client.list()
    assert isinstance(info.value.__cause__, grpc.aio.AioRpcError)


async def test_kubelet_error_is_converted(kubelet: FakeKubelet) -> None:
    kubelet.fail_with = (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
    async with PodResourcesClient(str(kubelet.socket_path)) as client:
        with pytest.raises(KubeletError) as info:
            await client.list()
    assert not isinstance(info.value, KubeletUnavailable)
    assert info.value.code == "RESOURCE_EXHAUSTED"
    assert info.value.details == "rejected by rate limit"
    assert str(info.value) == (
        f"kubelet PodResources call on {kubelet.socket_path} failed: RESOURCE_EXHAUSTED: rejected by rate limit"
    )


def _many_pods(n_pods: int, ids_per_pod: int) -> list[podresources_pb2.PodResources]:
    # Time-slicing with many replicas: long device id lists, plus a non-GPU resource to filter out.
    return [
        pod_resources(
            f"team-{p % 7}",
            f"worker-{p}",
            {
                "main": [
                    ("nvidia.com/gpu", [f"{UUID0}::{r}" for r in range(ids_per_pod)]),
                    ("example.com/hugepages", [f"hp-{p}-{r}" for r in range(10)]),
                ]
            },
        )
        for p in range(n_pods)
    ]


async def test_message_over_4_mib(kubelet: FakeKubelet) -> None:
    kubelet.pods = _many_pods(400, 250)
    size = podresources_pb2.ListPodResourcesResponse(pod_resources=kubelet.pods).ByteSize()
    assert size > 4 * 1024 * 1024
    async with PodResourcesClient(str(kubelet.socket_path)) as client:
        got = await client.list()
    assert len(got) == 400 * 250
    assert got[-1] == Assignment(
        ContainerRef("team-0", "worker-399", "main"), "nvidia.com/gpu", f"{UUID0}::249"
    )
    # gRPC's default 4 MiB limit is what breaks dcgm-exporter (#509); it surfaces as a KubeletError here.
    async with PodResourcesClient(str(kubelet.socket_path), max_message_bytes=4 * 1024 * 1024) as small:
        with pytest.raises(KubeletError) as info:
            await small.list()
    assert info.value.code == "RESOURCE_EXHAUSTED"


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("gpu.nvidia.com", True),
        ("gpu.amd.com", True),
        ("gpu.amd.com.v2", True),  # AMD's exporter accepts the prefix
        ("compute-domain.nvidia.com", False),  # NVIDIA's other DRA driver: IMEX channels, not GPUs
        ("dra.example.com", False),
    ],
)
def test_dra_driver_filter(driver: str, expected: bool) -> None:
    assert is_gpu_driver(driver) is expected
    assert is_gpu_driver(driver, {driver})


def test_dra_claims_become_assignments_after_plugin_devices() -> None:
    gpu_claim = dra_claim("ml", "llm-gpus", "gpu.nvidia.com", "node-1", ["gpu-0", "gpu-1-mig-9-4-1"])
    imex = dra_claim("ml", "imex", "compute-domain.nvidia.com", "node-1", ["channel-0"])
    response = podresources_pb2.ListPodResourcesResponse(
        pod_resources=[
            pod_resources(
                "ml",
                "llm-0",
                {"server": [("nvidia.com/gpu", [UUID0])]},
                {"server": [gpu_claim, imex], "sidecar": []},
            )
        ]
    )
    server = ContainerRef("ml", "llm-0", "server")
    got = assignments_from_response(response)
    assert got == (
        Assignment(server, "nvidia.com/gpu", UUID0),
        Assignment(
            server,
            "gpu.nvidia.com",
            "node-1/gpu-0",
            DraDevice("gpu.nvidia.com", "node-1", "gpu-0", "ml/llm-gpus"),
        ),
        Assignment(
            server,
            "gpu.nvidia.com",
            "node-1/gpu-1-mig-9-4-1",
            DraDevice("gpu.nvidia.com", "node-1", "gpu-1-mig-9-4-1", "ml/llm-gpus"),
        ),
    )
    assert got[1].dra is not None and got[1].dra.key == "gpu.nvidia.com/node-1/gpu-0"


def test_dra_claim_from_an_old_kubelet_without_device_names_is_skipped() -> None:
    # Kubernetes <= 1.30: ClaimResource had only cdi_devices; nothing names the device.
    old = podresources_pb2.DynamicResource(
        claim_name="c",
        claim_namespace="ml",
        claim_resources=[
            podresources_pb2.ClaimResource(cdi_devices=[podresources_pb2.CDIDevice(name="x=y")])
        ],
    )
    response = podresources_pb2.ListPodResourcesResponse(
        pod_resources=[pod_resources("ml", "p", {}, {"main": [old]})]
    )
    assert assignments_from_response(response) == ()
