"""Errors of the Kubernetes clients.

Hierarchy::

    GpuscaleError
    └── KubeError                     anything this layer raises on purpose
        ├── KubeletError              a PodResources call failed (``code``: the gRPC status name)
        │   └── KubeletUnavailable    the kubelet cannot be reached: no socket, connection refused, timeout
        ├── KubeConfigError           no usable kubeconfig / in-cluster service account
        ├── KubeApiError              an API server request failed (``status``: HTTP status, 0 = no response)
        │   └── WorkloadResolutionError   a ScaledObject's pods cannot be found (names the object)
        └── ServiceResolutionError    a Service's endpoints cannot be found (names the Service and why)

Vendor exceptions are converted in exactly one place each, with ``raise ... from e``: ``grpc.RpcError`` in
``podresources.py``, kubernetes_asyncio/aiohttp errors in ``_http.py``, ``ConfigException`` in ``pods.py``.
"""

from __future__ import annotations

from ..errors import GpuscaleError

__all__ = [
    "KubeApiError",
    "KubeConfigError",
    "KubeError",
    "KubeletError",
    "KubeletUnavailable",
    "ServiceResolutionError",
    "WorkloadResolutionError",
]


class KubeError(GpuscaleError):
    """Base of the errors of the Kubernetes clients."""


class KubeletError(KubeError):
    """A PodResources call failed. ``code`` is the gRPC status name (``RESOURCE_EXHAUSTED``...)."""

    def __init__(self, socket_path: str, code: str, details: str) -> None:
        super().__init__(f"kubelet PodResources call on {socket_path} failed: {code}: {details}")
        self.socket_path = socket_path
        self.code = code
        self.details = details


class KubeletUnavailable(KubeletError):
    """The kubelet's PodResources socket cannot be reached (missing, refused, or too slow)."""


class KubeConfigError(KubeError):
    """Neither the kubeconfig nor the in-cluster service account gives a usable API server address."""


class KubeApiError(KubeError):
    """An API server request failed. ``status`` is the HTTP status (0: no response), ``reason`` the
    ``Status.reason`` (``NotFound``, ``Expired``...) when the server sent one."""

    def __init__(self, path: str, status: int, reason: str, message: str) -> None:
        what = f"HTTP {status}" if status else "no response"
        super().__init__(f"GET {path}: {what}{f' {reason}' if reason else ''}: {message}")
        self.path = path
        self.status = status
        self.reason = reason
        self.message = message


class WorkloadResolutionError(KubeApiError):
    """The pods of a ScaledObject cannot be found. The message names the ScaledObject and the step."""

    def __init__(self, namespace: str, name: str, problem: str, *, status: int = 0, reason: str = "") -> None:
        KubeError.__init__(self, f"ScaledObject {namespace}/{name}: {problem}")
        self.path = f"/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects/{name}"
        self.status = status
        self.reason = reason
        self.message = problem
        self.namespace = namespace
        self.name = name


class ServiceResolutionError(KubeError):
    """A Service's ready endpoints cannot be found: it does not exist, it is of type ``ExternalName``, it has
    no such port, or the API failed (``status``: the HTTP status, 0 = no response or not an API failure).
    ``transient``: the API did not answer or failed (0 with ``api_failed``, 429, 5xx), so what was known
    before may still hold."""

    def __init__(
        self, namespace: str, name: str, problem: str, *, status: int = 0, api_failed: bool = False
    ) -> None:
        super().__init__(f"Service {namespace}/{name}: {problem}")
        self.namespace = namespace
        self.name = name
        self.problem = problem
        self.status = status
        self.transient = api_failed and (status == 0 or status == 429 or status >= 500)
