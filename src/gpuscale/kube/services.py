"""From a Service and one of its ports to the addresses of its ready endpoints, the way kube-proxy finds them,
keeping only the Service's own pods.

Why here and not a URL in the trigger metadata: the scaler reads what a ScaledObject names, so a name must
never become an arbitrary address. A Service of the ScaledObject's namespace (or of one the operator
allows) can only lead to the pods behind it: ``ExternalName`` (any DNS name) is refused, and so is an
endpoint that is not one of the pods its selector selects. EndpointSlices are not proof: anyone who may
write one in the namespace can label it with the Service's name and give it any address (a node's kubelet,
``169.254.169.254``, another namespace's admin port). A Service without a selector has only such
hand-written slices, so it is read only where the operator allows it (``manual_endpoints``, the scaler's
``--request-path-manual-endpoints``).

How: ``GET /api/v1/namespaces/<ns>/services/<name>`` → the port, by number (``spec.ports[].port``) or by
name → ``LIST /apis/discovery.k8s.io/v1/namespaces/<ns>/endpointslices`` with
``labelSelector=kubernetes.io/service-name=<name>`` → in each slice of an IP address type, the slice port
whose name is the Service port's name (its ``port`` is the target port on the endpoints) and every endpoint
whose ``conditions.ready`` is not false (unset means ready) → its first address. An endpoint in two slices
(while the controller moves it) counts once. Then, for a Service with a selector, one
``LIST /api/v1/namespaces/<ns>/pods`` with the selector as ``labelSelector``: an endpoint is kept only if its
``targetRef`` is a Pod of the namespace among those, not finished, and its address is one of that pod's IPs
(``status.podIPs``, ``status.podIP``); the others are left out (``ServiceEndpoints.left_out``).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..netaddr import join_host_port
from ._http import Json, KubeApi, get_json
from .errors import KubeApiError, ServiceResolutionError

__all__ = ["ServiceEndpoints", "resolve_endpoints"]

log = logging.getLogger(__name__)

_SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_IP_TYPES = ("IPv4", "IPv6")


@dataclass(frozen=True, slots=True)
class ServiceEndpoints:
    """The ready endpoints of one port of a Service: ``addresses``, ``host:port`` (IPv6 in brackets), sorted;
    ``port_name``: the Service port's name (``""`` for an unnamed one); ``left_out``: how many more ready
    endpoints its EndpointSlices list on the port that are not the Service's pods (never read)."""

    namespace: str
    service: str
    port_name: str
    addresses: tuple[str, ...]
    left_out: int = 0


async def resolve_endpoints(
    api: KubeApi,
    namespace: str,
    service: str,
    port: int | str,
    *,
    manual_endpoints: bool = False,
    timeout: float = 10.0,
) -> ServiceEndpoints:
    """The ready endpoints of ``port`` (a number or a port's name) of Service ``namespace/service`` that are
    pods its selector selects. A Service without a selector is refused unless ``manual_endpoints`` (then every
    ready IP endpoint of its slices is taken). ``ServiceResolutionError`` names the Service and what is
    wrong."""

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
            "path must be a Service with a selector (or, where --request-path-manual-endpoints allows it, "
            "EndpointSlices of its own)"
        )
    port_name, problem = _port_name(spec.get("ports") or [], port)
    if problem is not None:
        raise fail(problem)
    selector = _selector(spec.get("selector"))
    if not selector and not manual_endpoints:
        raise fail(
            "has no selector: its EndpointSlices are written by hand and can name any address, so the scaler "
            "reads such a Service only where the operator allows it (--request-path-manual-endpoints)"
        )
    try:
        slices = await get_json(
            api,
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            [("labelSelector", f"{_SERVICE_NAME_LABEL}={service}")],
            timeout=timeout,
        )
    except KubeApiError as e:
        raise fail("cannot list its EndpointSlices", e) from e
    found = _ready_endpoints(slices.get("items") or [], port_name)
    if not selector or not found:
        return ServiceEndpoints(namespace, service, port_name, tuple(sorted(found)))
    try:
        pods = await get_json(
            api,
            f"/api/v1/namespaces/{namespace}/pods",
            [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))],
            timeout=timeout,
        )
    except KubeApiError as e:
        raise fail("cannot list the pods its selector selects", e) from e
    ips = _pod_ips(pods.get("items") or [])
    kept: list[str] = []
    left_out = 0
    for address, (ip, targets) in found.items():
        whys = [_not_a_pod_of(target, ip, namespace, ips) for target in targets]
        if None in whys:  # in two slices, one naming the pod right is enough: it is the pod's IP
            kept.append(address)
        else:
            left_out += 1
            log.debug(
                "Service %s/%s: endpoint %s left out, not one of the Service's pods: %s",
                namespace,
                service,
                address,
                "; ".join(sorted(set(str(w) for w in whys))),
            )
    return ServiceEndpoints(namespace, service, port_name, tuple(sorted(kept)), left_out)


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


def _selector(value: object) -> dict[str, str]:
    """A Service's ``spec.selector`` (``{}``: none, as the EndpointSlice controller reads an empty one)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _pod_ips(items: Sequence[Json]) -> dict[str, set[str]]:
    """Each pod's name → its IPs (``status.podIPs``, ``status.podIP``), for pods not finished (a finished
    pod's IP may be another pod's by now)."""
    out: dict[str, set[str]] = {}
    for pod in items:
        if not isinstance(pod, dict):
            continue
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        name = (pod.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            continue
        ips = out.setdefault(name, set())
        for entry in [{"ip": status.get("podIP")}, *(status.get("podIPs") or [])]:
            text = entry.get("ip") if isinstance(entry, dict) else None
            if not text:
                continue
            try:
                ips.add(str(ipaddress.ip_address(str(text))))
            except ValueError:
                continue
    return out


def _not_a_pod_of(target: object, ip: str, namespace: str, ips: Mapping[str, set[str]]) -> str | None:
    """Why an endpoint (its ``targetRef``, its address ``ip``) is not a selected pod of ``namespace`` (whose
    IPs ``ips`` are), or ``None``: it is one."""
    if not isinstance(target, dict):
        return "no targetRef (not a pod)"
    kind, name = target.get("kind"), target.get("name")
    where = target.get("namespace") or namespace
    if kind != "Pod":
        return f"its targetRef is a {kind or 'reference without a kind'}, not a Pod"
    if where != namespace:
        return f"its targetRef is Pod {where}/{name}, of another namespace"
    if not isinstance(name, str) or name not in ips:
        return (
            f"its targetRef Pod {namespace}/{name} is not one the Service's selector selects (or is finished)"
        )
    if ip not in ips[name]:
        return f"{ip} is not an IP of Pod {namespace}/{name}"
    return None


def _ready_endpoints(items: Sequence[Json], port_name: str) -> dict[str, tuple[str, list[object]]]:
    """``host:port`` → (its IP, the ``targetRef`` of each endpoint that names it) of every ready endpoint of
    the slices ``items``, on the slice port ``port_name``."""
    out: dict[str, tuple[str, list[object]]] = {}
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
            address = join_host_port(str(ip), target)
            out.setdefault(address, (str(ip), []))[1].append(endpoint.get("targetRef"))
    return out
