"""The kubelet PodResources v1 API: which device the kubelet handed to which container.

One long-lived ``grpc.aio`` channel to ``unix://<socket>``, created lazily inside the running event loop. The
kubelet re-creates its socket when it restarts; the client notices a new socket file (or a failed call) and
dials again, so a restart costs at most one failed call. The receive limit is raised well above gRPC's 4 MiB
default, which a node with many pods exceeds (dcgm-exporter #509). The kubelet rate-limits this API to 100 qps
with a burst of 10; the agent calls it about once per sampling interval.

This is the one module that reads PodResources messages and the one place ``grpc.RpcError`` becomes a
``KubeletError``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import TYPE_CHECKING, TypeVar

import grpc
import grpc.aio

from gpuscale._proto import podresources_pb2, podresources_pb2_grpc

from ..model import Assignment, ContainerRef, DraDevice
from .errors import KubeletError, KubeletUnavailable

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_SOCKET_PATH",
    "PodResourcesClient",
    "assignments_from_response",
    "is_gpu_driver",
    "is_gpu_resource",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
if TYPE_CHECKING:
    from gpuscale._proto.podresources_pb2_grpc import PodResourcesListerAsyncStub as _Stub

DEFAULT_SOCKET_PATH = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_NVIDIA_GPU = "nvidia.com/gpu"
_NVIDIA_MIG_PREFIX = "nvidia.com/mig-"
_AMD_PREFIX = "amd.com/"
_NVIDIA_DRA = "gpu.nvidia.com"
_AMD_DRA = "gpu.amd.com"

# Errors that mean "nobody is listening (right now)"; everything else is the kubelet answering with an error.
_UNAVAILABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def is_gpu_resource(resource_name: str, extra_resource_names: Collection[str] = ()) -> bool:
    """Whether a device-plugin resource is a GPU (the filter dcgm-exporter and AMD's exporter apply)."""
    return (
        resource_name == _NVIDIA_GPU
        or resource_name.startswith(_NVIDIA_MIG_PREFIX)
        or resource_name.startswith(_AMD_PREFIX)
        or resource_name in extra_resource_names
    )


def is_gpu_driver(driver_name: str, extra_names: Collection[str] = ()) -> bool:
    """Whether a DRA driver hands out GPUs: NVIDIA's ``gpu.nvidia.com`` (not its ``compute-domain``
    driver), AMD's ``gpu.amd.com`` (the prefix AMD's exporter accepts), or one of ``extra_names``."""
    return driver_name == _NVIDIA_DRA or driver_name.startswith(_AMD_DRA) or driver_name in extra_names


def assignments_from_response(
    response: podresources_pb2.ListPodResourcesResponse, extra_resource_names: Collection[str] = ()
) -> tuple[Assignment, ...]:
    """Every GPU of every container in a ``List`` answer, in the kubelet's order: each device-plugin device
    id, then each device of a GPU DRA driver (``dynamic_resources``; the kubelet fills them where its
    ``KubeletPodResourcesDynamicResources`` feature gate is on). ``extra_resource_names`` may name both
    device-plugin resources and DRA drivers."""
    out: list[Assignment] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            ref = ContainerRef(namespace=pod.namespace, pod=pod.name, container=container.name)
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, extra_resource_names):
                    continue
                out.extend(
                    Assignment(container=ref, resource_name=devices.resource_name, device_id=device_id)
                    for device_id in devices.device_ids
                )
            for claim in container.dynamic_resources:
                claim_name = f"{claim.claim_namespace}/{claim.claim_name}"
                for r in claim.claim_resources:
                    if not r.device_name or not is_gpu_driver(r.driver_name, extra_resource_names):
                        continue
                    dra = DraDevice(r.driver_name, r.pool_name, r.device_name, claim_name)
                    out.append(
                        Assignment(
                            container=ref,
                            resource_name=r.driver_name,
                            device_id=f"{r.pool_name}/{r.device_name}",
                            dra=dra,
                        )
                    )
    return tuple(out)


def _socket_identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class PodResourcesClient:
    """Client of the kubelet's PodResources API on one unix socket. Use from one event loop; ``close()``
    when done (also usable as ``async with``)."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET_PATH,
        *,
        timeout: float = 10.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        extra_resource_names: Iterable[str] = (),
    ) -> None:
        self.socket_path = str(socket_path)
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self.extra_resource_names = frozenset(extra_resource_names)
        self._channel: grpc.aio.Channel | None = None
        self._stub: _Stub | None = None
        self._socket_id: tuple[int, int] | None = None

    async def __aenter__(self) -> PodResourcesClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def list(self) -> tuple[Assignment, ...]:
        """The GPU devices assigned to containers on this node, one ``Assignment`` per device id.

        Raises ``KubeletUnavailable`` when the socket is missing or does not answer, ``KubeletError`` when
        the kubelet answers with an error (e.g. ``RESOURCE_EXHAUSTED`` from its rate limit).
        """
        request = podresources_pb2.ListPodResourcesRequest()
        response = await self._call(lambda stub: stub.List(request, timeout=self.timeout))
        return assignments_from_response(response, self.extra_resource_names)

    async def allocatable(self) -> tuple[tuple[str, str], ...]:
        """``(resource_name, device_id)`` of every GPU device the node can hand out
        (``GetAllocatableResources``, GA since Kubernetes 1.28)."""
        request = podresources_pb2.AllocatableResourcesRequest()
        response = await self._call(lambda stub: stub.GetAllocatableResources(request, timeout=self.timeout))
        return tuple(
            (devices.resource_name, device_id)
            for devices in response.devices
            if is_gpu_resource(devices.resource_name, self.extra_resource_names)
            for device_id in devices.device_ids
        )

    async def close(self) -> None:
        channel, self._channel, self._stub, self._socket_id = self._channel, None, None, None
        if channel is not None:
            await channel.close()

    async def _call(self, invoke: Callable[[_Stub], Awaitable[_T]]) -> _T:
        # One retry on a fresh channel when the old one is broken: after a kubelet restart the old channel
        # sits in reconnect backoff, a new one dials at once.
        for attempt in (1, 2):
            stub = await self._ensure_channel()
            try:
                return await invoke(stub)
            except grpc.aio.AioRpcError as e:
                if e.code() in _UNAVAILABLE_CODES:
                    await self.close()
                    if attempt == 1 and e.code() is grpc.StatusCode.UNAVAILABLE:
                        continue
                    raise KubeletUnavailable(self.socket_path, e.code().name, e.details() or "") from e
                raise KubeletError(self.socket_path, e.code().name, e.details() or "") from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ensure_channel(self) -> _Stub:
        socket_id = _socket_identity(self.socket_path)
        if socket_id is None:
            await self.close()
            raise KubeletUnavailable(
                self.socket_path,
                "UNAVAILABLE",
                "socket not found; is the kubelet running and /var/lib/kubelet/pod-resources mounted?",
            )
        if self._stub is not None and socket_id != self._socket_id:
            log.info("kubelet socket %s was re-created; reconnecting", self.socket_path)
            await self.close()
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{self.socket_path}",
                options=[
                    ("grpc.max_receive_message_length", self.max_message_bytes),
                    ("grpc.max_send_message_length", 1024 * 1024),
                    ("grpc.initial_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 5000),
                ],
            )
            self._stub = podresources_pb2_grpc.PodResourcesListerStub(self._channel)
            self._socket_id = socket_id
        return self._stub
