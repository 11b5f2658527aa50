"""A local kubelet PodResources server: the generated ``PodResourcesListerServicer`` served with ``grpc.aio``
on a unix socket. Each node of the demo cluster has one; the tests use it as their fake kubelet
(``tests/fakes/kubelet.py`` re-exports it).

``pods`` is mutable between calls. ``stop()`` removes the socket the way a kubelet restart does; ``start()``
binds it again (a new socket file). ``fail_with`` makes the next calls fail with a gRPC status, e.g.
``RESOURCE_EXHAUSTED`` "rejected by rate limit" like the kubelet's 100 qps limiter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from gpuscale._proto import podresources_pb2, podresources_pb2_grpc

__all__ = ["LocalKubelet", "dra_claim", "pod_resources"]


def pod_resources(
    namespace: str,
    name: str,
    containers: Mapping[str, Sequence[tuple[str, Sequence[str]]]],
    claims: Mapping[str, Sequence[podresources_pb2.DynamicResource]] | None = None,
) -> podresources_pb2.PodResources:
    """A ``PodResources`` message: ``containers`` maps a container name to ``(resource_name, device_ids)``;
    ``claims`` a container name to its DRA claims (``dra_claim``)."""
    claims = claims or {}
    return podresources_pb2.PodResources(
        namespace=namespace,
        name=name,
        containers=[
            podresources_pb2.ContainerResources(
                name=cname,
                devices=[
                    podresources_pb2.ContainerDevices(resource_name=rname, device_ids=list(ids))
                    for rname, ids in containers.get(cname, ())
                ],
                dynamic_resources=list(claims.get(cname, ())),
            )
            for cname in dict.fromkeys([*containers, *claims])
        ],
    )


def dra_claim(
    namespace: str, claim: str, driver: str, pool: str, devices: Sequence[str]
) -> podresources_pb2.DynamicResource:
    """A DRA claim as the kubelet reports it: the devices of ``driver`` in ``pool`` allocated to it, each
    with the CDI device name NVIDIA's driver would give it."""
    return podresources_pb2.DynamicResource(
        claim_name=claim,
        claim_namespace=namespace,
        claim_resources=[
            podresources_pb2.ClaimResource(
                cdi_devices=[podresources_pb2.CDIDevice(name=f"k8s.{driver}/claim={claim}-{device}")],
                driver_name=driver,
                pool_name=pool,
                device_name=device,
            )
            for device in devices
        ],
    )


class LocalKubelet(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.pods: list[podresources_pb2.PodResources] = []
        self.allocatable: list[podresources_pb2.ContainerDevices] = []
        self.fail_with: tuple[grpc.StatusCode, str] | None = None
        self.calls = 0
        self._server: grpc.aio.Server | None = None

    async def List(
        self, request: podresources_pb2.ListPodResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> podresources_pb2.ListPodResourcesResponse:
        self.calls += 1
        if self.fail_with is not None:
            await context.abort(*self.fail_with)
        return podresources_pb2.ListPodResourcesResponse(pod_resources=self.pods)

    async def GetAllocatableResources(
        self,
        request: podresources_pb2.AllocatableResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> podresources_pb2.AllocatableResourcesResponse:
        self.calls += 1
        if self.fail_with is not None:
            await context.abort(*self.fail_with)
        return podresources_pb2.AllocatableResourcesResponse(devices=self.allocatable)

    async def Get(
        self, request: podresources_pb2.GetPodResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> podresources_pb2.GetPodResourcesResponse:
        self.calls += 1
        if self.fail_with is not None:
            await context.abort(*self.fail_with)
        for pod in self.pods:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return podresources_pb2.GetPodResourcesResponse(pod_resources=pod)
        await context.abort(
            grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} not found in {request.pod_namespace}"
        )
        raise AssertionError("abort raises")

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"the kubelet on {self.socket_path} is already running")
        server = grpc.aio.server(options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)
        if self.socket_path.exists():
            os.unlink(self.socket_path)

    async def restart(self) -> None:
        await self.stop()
        await self.start()
