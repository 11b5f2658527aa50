"""Where each GPU pod of this node serves its inference engine's metrics, from the pod's annotations.

Why: the engine's own signals (waiting requests, KV-cache fill, time to first token) say how loaded an LLM
server is where GPU utilization reads 100 % either way; the agent reads them on the node, from the pods it
already attributes GPUs to, with no Prometheus in the path.

How: a pod names its endpoint with

- ``gpuscale.io/metrics-port`` (required for this form), ``gpuscale.io/metrics-path`` (default
  ``/metrics``), ``gpuscale.io/metrics-scheme`` (``http``, the default, or ``https``); else
- the usual ``prometheus.io/scrape: "true"`` with ``prometheus.io/port``, ``prometheus.io/path`` and
  ``prometheus.io/scheme`` (same defaults).

``gpuscale.io/`` wins where both are set. The host is the pod's IP as the Kubernetes API gives it
(``status.podIP``), never a name a pod could choose. A bad value (a port outside 1-65535, a scheme other
than http/https, a path that does not start with ``/``) gives no endpoint but an ``EndpointProblem`` whose
one-line reason names the annotation, its value and what is allowed.

Security: only pods that hold a GPU of this node (``pods_holding_gpus``: the kubelet's PodResources
assignments, not a pod's own claims) are ever scraped, so the agent connects only to pods on its own node
that it attributes GPUs to; a pod cannot make the agent connect anywhere else by annotating itself, and
other pods' annotations are ignored. The https form does not verify the certificate: a pod IP is in no
certificate, so it encrypts but does not authenticate (as Prometheus' usual ``kubernetes-pods`` job with
``insecure_skip_verify`` does).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ...model import Assignment, PodInfo

__all__ = [
    "ANNOTATION_PATH",
    "ANNOTATION_PORT",
    "ANNOTATION_SCHEME",
    "PROMETHEUS_PATH",
    "PROMETHEUS_PORT",
    "PROMETHEUS_SCHEME",
    "PROMETHEUS_SCRAPE",
    "Endpoint",
    "EndpointProblem",
    "PodKey",
    "discover",
    "endpoint_of",
    "pods_holding_gpus",
]

PodKey = tuple[str, str]  # (namespace, name)

ANNOTATION_PORT = "gpuscale.io/metrics-port"
ANNOTATION_PATH = "gpuscale.io/metrics-path"
ANNOTATION_SCHEME = "gpuscale.io/metrics-scheme"
PROMETHEUS_SCRAPE = "prometheus.io/scrape"
PROMETHEUS_PORT = "prometheus.io/port"
PROMETHEUS_PATH = "prometheus.io/path"
PROMETHEUS_SCHEME = "prometheus.io/scheme"

_PORT = re.compile(r"[0-9]{1,5}")  # ASCII digits only: str.isdigit() takes full-width ones too
# printable ASCII without spaces; a query string is allowed (/metrics?format=prometheus)
_PATH = re.compile(r"/[!-~]{0,1023}")
_SCHEMES = ("http", "https")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An engine's metrics endpoint. ``source``: which annotations named it (``gpuscale.io``,
    ``prometheus.io``)."""

    scheme: str
    host: str
    port: int
    path: str
    source: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 pod IP
        return f"{self.scheme}://{host}:{self.port}{self.path}"


@dataclass(frozen=True, slots=True)
class EndpointProblem:
    """A pod that asks to be scraped but cannot be: ``reason`` is one line, e.g. ``annotation
    gpuscale.io/metrics-port value "80a" must be a port number 1-65535``."""

    reason: str


def _show(value: str) -> str:
    """A value as messages quote it: ``"…"``, cut to 100 characters, one line and ASCII (``\\n``,
    ``\\uff18``), so a log line stays one line and says exactly what was written."""
    text = value if len(value) <= 100 else value[:99] + "\u2026"
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def _port(key: str, value: str) -> int | EndpointProblem:
    if _PORT.fullmatch(value) and 1 <= int(value) <= 65535:
        return int(value)
    return EndpointProblem(f"annotation {key} value {_show(value)} must be a port number 1-65535")


def _scheme(key: str, value: str | None) -> str | EndpointProblem:
    if value is None:
        return "http"
    if value.lower() in _SCHEMES:
        return value.lower()
    return EndpointProblem(f"annotation {key} value {_show(value)} must be one of [http, https]")


def _path(key: str, value: str | None) -> str | EndpointProblem:
    if value is None:
        return "/metrics"
    if _PATH.fullmatch(value):
        return value
    return EndpointProblem(
        f"annotation {key} value {_show(value)} must be a path starting with / "
        "(printable ASCII, no spaces, at most 1024 characters)"
    )


def endpoint_of(pod: PodInfo) -> Endpoint | EndpointProblem | None:
    """The pod's engine endpoint; ``None`` when its annotations ask for no scrape (most GPU pods: training
    jobs, batch inference without an engine endpoint); an ``EndpointProblem`` when they ask for one that
    cannot be made (bad value, or no pod IP yet)."""
    a = pod.annotations
    if ANNOTATION_PORT in a:
        keys, source = (ANNOTATION_PORT, ANNOTATION_PATH, ANNOTATION_SCHEME), "gpuscale.io"
    elif a.get(PROMETHEUS_SCRAPE) == "true":
        keys, source = (PROMETHEUS_PORT, PROMETHEUS_PATH, PROMETHEUS_SCHEME), "prometheus.io"
        if PROMETHEUS_PORT not in a:
            return EndpointProblem(
                f'annotation {PROMETHEUS_SCRAPE} is "true" but {PROMETHEUS_PORT} is not set: '
                f"set it (or {ANNOTATION_PORT}) to the engine's metrics port"
            )
    else:
        return None
    port_key, path_key, scheme_key = keys
    port = _port(port_key, a[port_key])
    path = _path(path_key, a.get(path_key))
    scheme = _scheme(scheme_key, a.get(scheme_key))
    for part in (port, path, scheme):
        if isinstance(part, EndpointProblem):
            return part
    assert isinstance(port, int) and isinstance(path, str) and isinstance(scheme, str)
    if not pod.ip:
        return EndpointProblem("the pod has no IP yet (status.podIP is empty)")
    return Endpoint(scheme, pod.ip, port, path, source)


def pods_holding_gpus(assignments: Mapping[str, Iterable[Assignment]]) -> frozenset[PodKey]:
    """The pods the kubelet assigned one of this node's GPUs to (GPU UUID → assignments, as
    ``NodeState.assignments`` holds them): the only pods the agent scrapes."""
    return frozenset((a.container.namespace, a.container.pod) for held in assignments.values() for a in held)


def discover(
    pods: Mapping[PodKey, PodInfo], holders: Collection[PodKey]
) -> dict[PodKey, Endpoint | EndpointProblem]:
    """The engine endpoint (or why there is none) of each pod in ``pods`` that is in ``holders`` and asks to
    be scraped. A pod outside ``holders`` is never scraped, whatever its annotations say."""
    found: dict[PodKey, Endpoint | EndpointProblem] = {}
    for key in holders:
        pod = pods.get(key)
        if pod is None:
            continue
        endpoint = endpoint_of(pod)
        if endpoint is not None:
            found[key] = endpoint
    return found
