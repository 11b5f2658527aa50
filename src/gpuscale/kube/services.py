"""From a Service and one of its ports to the addresses of its ready endpoints, the way kube-proxy finds them.

Why here and not a URL in the trigger metadata: the scaler reads what a ScaledObject names, so a name must
never become an arbitrary address. A Service of the ScaledObject's namespace (or of one the operator
allows) can only lead to the pods behind it; ``ExternalName`` (any DNS name) is refused.

How: ``GET /api/v1/namespaces/<ns>/services/<name>`` → the port, by number (``spec.ports[].port``) or by
name → ``LIST /apis/discovery.k8s.io/v1/namespaces/<ns>/endpointslices`` with
``labelSelector=kubernetes.io/service-name=<name>`` → in each slice of an IP address type, the slice port
whose name is the Service port's name (its ``port`` is the target port on the endpoints) and every endpoint
whose ``conditions.ready`` is not false (unset means ready) → its first address. An endpoint in two slices
(while the controller moves it) counts once.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from ..netaddr import join_host_port
from ._http import Json, KubeApi, get_json
from .errors import KubeApiError, ServiceResolutionError

__all__ = ["ServiceEndpoints", "resolve_endpoints"]

_SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_IP_TYPES = ("IPv4", "IPv6")


@dataclass(frozen=True, slots=True)
class ServiceEndpoints:
    """The ready endpoints of one port of a Service: ``addresses``, ``host:port`` (IPv6 in brackets), sorted;
    ``port_name``: the Service port's name (``""`` for an unnamed one)."""

    namespace: str
    service: str
    port_name: str
    addresses: tuple[str, ...]


async def resolve_endpoints(
    api: KubeApi, namespace: str, service: str, port: int | str, *, timeout: float = 10.0
) -> ServiceEndpoints:
    """The ready endpoints of ``port`` (a number or a port's name) of Service ``namespace/service``.
    ``ServiceResolutionError`` names the Service and what is wrong."""

    def fail(problem: str, e: KubeApiError | None = None) -> ServiceResolutionError:
        if e is None:
            return ServiceResolutionError(namespace, service, problem)
        return ServiceResolutionError(namespace, service, f"{problem}: {e}", status=e.status, api_failed=True)

    try:
        svc = await get_json(api, f"/api/v1/namespaces/{namespace}/services/{service}", timeout=timeout)
    except KubeApiError as e:
        if e.status == 404:
            raise fail("not found") from e
        raise fail("cannot read the Service", e) from e
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        raise fail(
            f'is of type ExternalName ("{spec.get("externalName", "")}"), an arbitrary DNS name: the request '
            "path must be a Service with endpoints (a selector, or EndpointSlices of its own)"
        )
    port_name, problem = _port_name(spec.get("ports") or [], port)
    if problem is not None:
        raise fail(problem)
    try:
        slices = await get_json(
            api,
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            [("labelSelector", f"{_SERVICE_NAME_LABEL}={service}")],
            timeout=timeout,
        )
    except KubeApiError as e:
        raise fail("cannot list its EndpointSlices", e) from e
    addresses = _ready_addresses(slices.get("items") or [], port_name)
    return ServiceEndpoints(namespace, service, port_name, tuple(sorted(addresses)))


def _port_name(ports: Sequence[Json], port: int | str) -> tuple[str, str | None]:
    """The name (``""``: unnamed) of the Service's TCP port ``port`` (its number or its name), or what is
    wrong with it."""
    shown: list[str] = []
    for p in ports:
        if not isinstance(p, dict):
            continue
        name, number = str(p.get("name") or ""), p.get("port")
        shown.append(f"{number} ({name})" if name else str(number))
        if (isinstance(port, int) and number == port) or (isinstance(port, str) and name == port):
            protocol = p.get("protocol") or "TCP"
            return name, None if protocol == "TCP" else f"port {port} is {protocol}, not TCP"
    return "", f"has no port {port} (its ports: {', '.join(shown) or 'none'})"


def _ready_addresses(items: Sequence[Json], port_name: str) -> set[str]:
    """``host:port`` of every ready endpoint of the slices ``items``, on the slice port ``port_name``."""
    out: set[str] = set()
    for s in items:
        if not isinstance(s, dict) or s.get("addressType") not in _IP_TYPES:
            continue  # FQDN slices name arbitrary hosts: never read
        target = None
        for p in s.get("ports") or []:
            if isinstance(p, dict) and str(p.get("name") or "") == port_name:
                if (p.get("protocol") or "TCP") == "TCP" and isinstance(p.get("port"), int):
                    target = int(p["port"])
                break
        if target is None or not 0 < target <= 65535:
            continue
        for endpoint in s.get("endpoints") or []:
            if not isinstance(endpoint, dict):
                continue
            if ((endpoint.get("conditions") or {}).get("ready")) is False:
                continue
            addresses = endpoint.get("addresses") or []
            if not addresses:
                continue
            try:
                ip = ipaddress.ip_address(str(addresses[0]))
            except ValueError:
                continue
            out.add(join_host_port(str(ip), target))
    return out
