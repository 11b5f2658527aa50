"""resolve_endpoints against FakeApiServer, both ways (``connection`` in conftest.py): a Service's port to the
addresses of its ready endpoints, as a request path is found; of a Service with a selector only its own pods,
a Service without one only where the operator allows it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpuscale.kube._http import KubeApi
from gpuscale.kube.errors import ServiceResolutionError
from gpuscale.kube.services import resolve_endpoints
from tests.fakes.apiserver import FakeApiServer, make_pod, pod_ref, select, target_pods

NO_SELECTOR = (
    "Service ai/gateway: has no selector: its EndpointSlices are written by hand and can name any address, so "
    "the scaler reads such a Service only where the operator allows it (--request-path-manual-endpoints)"
)


async def test_the_ready_endpoints_of_a_named_port(apiserver: FakeApiServer, api: KubeApi) -> None:
    """A Service without a selector, where the operator allows it: every ready IP endpoint of its slices."""
    apiserver.put_service("ai", "gateway", [("admin", 15000), ("http", 9090)])
    ports = [("admin", 15000), ("http", 19090)]
    apiserver.put_endpoint_slice(
        "ai",
        "gateway-a",
        service="gateway",
        endpoints=[("10.0.0.7", True), ("10.0.0.8", False), ("10.0.0.9", None)],  # None: ready
        ports=ports,
    )
    apiserver.put_endpoint_slice(
        "ai", "gateway-b", service="gateway", endpoints=[("10.0.0.7", True)], ports=ports
    )
    apiserver.put_endpoint_slice(
        "ai", "gateway-v6", service="gateway", endpoints=[("fd00::7", True)], ports=ports, address_type="IPv6"
    )
    apiserver.put_endpoint_slice(
        "ai",
        "gateway-fqdn",
        service="gateway",
        endpoints=[("evil.example", True)],
        ports=ports,
        address_type="FQDN",
    )
    apiserver.put_endpoint_slice(
        "ai", "other-a", service="other", endpoints=[("10.0.9.9", True)], ports=ports
    )
    apiserver.put_endpoint_slice(
        "ml", "gateway-a", service="gateway", endpoints=[("10.1.0.1", True)], ports=ports
    )
    for port in ("http", 9090):
        found = await resolve_endpoints(api, "ai", "gateway", port, manual_endpoints=True)
        assert found.port_name == "http"
        assert found.addresses == ("10.0.0.7:19090", "10.0.0.9:19090", "[fd00::7]:19090")
        assert found.left_out == 0
    apiserver.requests.clear()
    with pytest.raises(ServiceResolutionError) as e:  # not allowed: refused, and its slices not even listed
        await resolve_endpoints(api, "ai", "gateway", "http")
    assert (str(e.value), e.value.transient) == (NO_SELECTOR, False)
    assert apiserver.requests == ["GET /api/v1/namespaces/ai/services/gateway"]


async def test_an_unnamed_port(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_service("ai", "gateway", [("", 80)])
    apiserver.put_endpoint_slice(
        "ai", "gateway-a", service="gateway", endpoints=[("10.0.0.7", True)], ports=[("", 8080)]
    )
    assert (await resolve_endpoints(api, "ai", "gateway", 80, manual_endpoints=True)).addresses == (
        "10.0.0.7:8080",
    )
    apiserver.put_endpoint_slice("ai", "gateway-a", service="gateway", endpoints=[], ports=[("", 8080)])
    found = await resolve_endpoints(api, "ai", "gateway", 80, manual_endpoints=True)
    assert found.addresses == ()  # none ready: none


def _gateway_pods(apiserver: FakeApiServer) -> None:
    """Service ai/gateway selecting app=gateway, and pods around it: two of its own (one dual-stack), one
    finished, one of the namespace it does not select, one of another namespace with its labels."""
    select(apiserver.put_service("ai", "gateway", [("http", 9090)]), {"app": "gateway", "tier": "edge"})
    own = {"app": "gateway", "tier": "edge"}
    apiserver.add_pod(make_pod("ai", "gateway-1", node="n1", labels=own, ip="10.0.0.7"))
    two = make_pod("ai", "gateway-2", node="n1", labels=own, ip="10.0.0.8")
    two["status"]["podIPs"] = [{"ip": "10.0.0.8"}, {"ip": "fd00::8"}]
    apiserver.add_pod(two)
    apiserver.add_pod(make_pod("ai", "gateway-0", node="n1", labels=own, ip="10.0.0.6", phase="Succeeded"))
    apiserver.add_pod(make_pod("ai", "admin", node="n1", labels={"app": "admin"}, ip="10.0.0.50"))
    apiserver.add_pod(make_pod("ml", "gateway-1", node="n1", labels=own, ip="10.1.0.1"))


async def test_of_a_service_with_a_selector_only_its_own_pods_are_read(
    apiserver: FakeApiServer, api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """An EndpointSlice is no proof: one labelled with the Service's name can list any address. Only an
    endpoint whose targetRef is a pod of the namespace the selector selects, at one of that pod's IPs, is
    read; so it is with the flag too (it is about Services without a selector)."""
    _gateway_pods(apiserver)
    ports = [("http", 19090)]
    target_pods(
        apiserver.put_endpoint_slice(
            "ai", "gateway-abc", service="gateway", endpoints=[("10.0.0.7", True), ("10.0.0.8", None)],
            ports=ports,
        ),
        [pod_ref("ai", "gateway-1"), pod_ref("ai", "gateway-2")],
    )  # fmt: skip
    target_pods(
        apiserver.put_endpoint_slice(
            "ai", "gateway-v6", service="gateway", endpoints=[("fd00:0::8", True)], ports=ports,
            address_type="IPv6",
        ),
        [pod_ref("ai", "gateway-2")],
    )  # fmt: skip
    rogue = [
        ("169.254.169.254", None),  # no targetRef: any address
        ("10.0.0.99", pod_ref("ai", "gateway-1")),  # a pod of its own, not at its IP
        ("10.1.0.1", pod_ref("ml", "gateway-1")),  # another namespace's pod
        ("10.0.0.50", pod_ref("ai", "admin")),  # a pod its selector does not select
        ("10.0.0.6", pod_ref("ai", "gateway-0")),  # finished: its IP may be another pod's by now
        ("10.0.0.20", pod_ref("ai", "node-a", kind="Node")),
    ]
    target_pods(
        apiserver.put_endpoint_slice(
            "ai", "rogue", service="gateway", endpoints=[(a, True) for a, _ in rogue], ports=ports
        ),
        [t for _, t in rogue],
    )
    # the same address as one of the pods', in a rogue slice without a targetRef: the pod's slice has it
    apiserver.put_endpoint_slice(
        "ai", "rogue-2", service="gateway", endpoints=[("10.0.0.7", True)], ports=ports
    )
    apiserver.requests.clear()
    with caplog.at_level(logging.DEBUG, logger="gpuscale.kube.services"):
        for manual in (False, True):
            found = await resolve_endpoints(api, "ai", "gateway", "http", manual_endpoints=manual)
            assert found.addresses == ("10.0.0.7:19090", "10.0.0.8:19090", "[fd00::8]:19090")
            assert found.left_out == len(rogue)
    pod_lists = [r for r in apiserver.requests if "/pods" in r]
    assert pod_lists == ["GET /api/v1/namespaces/ai/pods?labelSelector=app%3Dgateway,tier%3Dedge"] * 2
    said = "\n".join(r.getMessage() for r in caplog.records)
    for line in (
        "endpoint 169.254.169.254:19090 left out, not one of the Service's pods: no targetRef (not a pod)",
        "endpoint 10.0.0.99:19090 left out, not one of the Service's pods: 10.0.0.99 is not an IP of Pod "
        "ai/gateway-1",
        "endpoint 10.1.0.1:19090 left out, not one of the Service's pods: its targetRef is Pod ml/gateway-1, of "
        "another namespace",
        "endpoint 10.0.0.50:19090 left out, not one of the Service's pods: its targetRef Pod ai/admin is not one "
        "the Service's selector selects (or is finished)",
        "endpoint 10.0.0.20:19090 left out, not one of the Service's pods: its targetRef is a Node, not a Pod",
    ):
        assert f"Service ai/gateway: {line}" in said


async def test_a_service_whose_endpoints_are_none_of_its_pods_has_none(
    apiserver: FakeApiServer, api: KubeApi
) -> None:
    _gateway_pods(apiserver)
    apiserver.put_endpoint_slice(
        "ai", "rogue", service="gateway", endpoints=[("169.254.169.254", True), ("10.0.0.5", True)],
        ports=[("http", 80)],
    )  # fmt: skip
    found = await resolve_endpoints(api, "ai", "gateway", 9090)
    assert (found.addresses, found.left_out) == ((), 2)
    apiserver.put_endpoint_slice("ai", "rogue", service="gateway", endpoints=[], ports=[("http", 80)])
    apiserver.requests.clear()
    found = await resolve_endpoints(api, "ai", "gateway", 9090)
    assert (found.addresses, found.left_out) == ((), 0)
    assert not any("/pods" in r for r in apiserver.requests)  # no endpoint: no pods to list


async def test_a_failing_pod_list_is_transient(apiserver: FakeApiServer, api: KubeApi) -> None:
    _gateway_pods(apiserver)
    target_pods(
        apiserver.put_endpoint_slice(
            "ai", "gateway-abc", service="gateway", endpoints=[("10.0.0.7", True)], ports=[("http", 9090)]
        ),
        [pod_ref("ai", "gateway-1")],
    )
    apiserver.fail_pod_lists_until = asyncio.get_running_loop().time() + 60
    with pytest.raises(ServiceResolutionError) as e:
        await resolve_endpoints(api, "ai", "gateway", 9090)
    assert str(e.value) == (
        "Service ai/gateway: cannot list the pods its selector selects: GET /api/v1/namespaces/ai/pods: HTTP "
        "500 InternalError: injected failure: pod lists failing"
    )
    assert e.value.transient


@pytest.mark.parametrize(
    ("setup", "port", "message", "transient"),
    [
        ("none", 9090, "Service ai/gateway: not found", False),
        (
            "external",
            9090,
            'Service ai/gateway: is of type ExternalName ("metrics.example.com"), an arbitrary DNS name: the '
            "request path must be a Service with a selector (or, where --request-path-manual-endpoints allows "
            "it, EndpointSlices of its own)",
            False,
        ),
        ("service", 9091, "Service ai/gateway: has no port 9091 (its ports: 9090 (http))", False),
        ("service", "metrics", "Service ai/gateway: has no port metrics (its ports: 9090 (http))", False),
        (
            "failing",
            9090,
            "Service ai/gateway: cannot read the Service: GET /api/v1/namespaces/ai/services/gateway: HTTP 503 InternalError: injected failure 503",
            True,
        ),
    ],
)
async def test_what_cannot_be_used_is_named(
    apiserver: FakeApiServer, api: KubeApi, setup: str, port: int | str, message: str, transient: bool
) -> None:
    if setup == "external":
        apiserver.put_service("ai", "gateway", [], type="ExternalName", external_name="metrics.example.com")
    elif setup != "none":
        apiserver.put_service("ai", "gateway", [("http", 9090)])
    if setup == "failing":
        apiserver.fail_next = [503]
    with pytest.raises(ServiceResolutionError) as e:
        await resolve_endpoints(api, "ai", "gateway", port)
    assert (str(e.value), e.value.transient) == (message, transient)
