"""resolve_endpoints against FakeApiServer, both ways (``connection`` in conftest.py): a Service's port to the
addresses of its ready endpoints, as a request path is found."""

from __future__ import annotations

import pytest

from gpuscale.kube._http import KubeApi
from gpuscale.kube.errors import ServiceResolutionError
from gpuscale.kube.services import resolve_endpoints
from tests.fakes.apiserver import FakeApiServer


async def test_the_ready_endpoints_of_a_named_port(apiserver: FakeApiServer, api: KubeApi) -> None:
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
        found = await resolve_endpoints(api, "ai", "gateway", port)
        assert found.port_name == "http"
        assert found.addresses == ("10.0.0.7:19090", "10.0.0.9:19090", "[fd00::7]:19090")


async def test_an_unnamed_port(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_service("ai", "gateway", [("", 80)])
    apiserver.put_endpoint_slice(
        "ai", "gateway-a", service="gateway", endpoints=[("10.0.0.7", True)], ports=[("", 8080)]
    )
    assert (await resolve_endpoints(api, "ai", "gateway", 80)).addresses == ("10.0.0.7:8080",)
    apiserver.put_endpoint_slice("ai", "gateway-a", service="gateway", endpoints=[], ports=[("", 8080)])
    assert (await resolve_endpoints(api, "ai", "gateway", 80)).addresses == ()  # none ready: none


@pytest.mark.parametrize(
    ("setup", "port", "message", "transient"),
    [
        ("none", 9090, "Service ai/gateway: not found", False),
        (
            "external",
            9090,
            'Service ai/gateway: is of type ExternalName ("metrics.example.com"), an arbitrary DNS name: the '
            "request path must be a Service with endpoints (a selector, or EndpointSlices of its own)",
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
