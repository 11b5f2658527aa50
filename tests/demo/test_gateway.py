"""The demo's stand-in gateway: it counts every request for the workload, holds them while no pod is Ready,
hands them on once one is, and serves its counts over HTTP as the scaler's ``envoy`` request path reads them.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from gpuscale.demo.cluster import GATEWAY_PORT, GATEWAY_SERVICE, NAMESPACE, DemoCluster, request_path
from gpuscale.demo.gateway import ADMIN_PATH, DemoGateway
from gpuscale.exposition import parse
from gpuscale.kube.pods import api_client_from
from gpuscale.kube.services import resolve_endpoints
from gpuscale.scaler import gateways
from gpuscale.scaling.requestpath import parse_ref


async def scrape(port: int) -> tuple[str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{ADMIN_PATH}") as response,
    ):
        assert response.status == 200
        return response.headers["Content-Type"], await response.text()


def read(body: str) -> tuple[float | None, float | None]:
    """(arrived, held) as the scaler reads them: ``requestPathFormat: envoy``, ``requestPathMatch: llm``."""
    return gateways.read(parse(body, gateways.selection("envoy")), "envoy", "llm")


async def test_at_zero_it_counts_and_holds_every_request_and_serves_them_as_envoy_does() -> None:
    gateway = DemoGateway("llm", hold_timeout_s=60.0)
    port = await gateway.start()
    try:
        assert port > 0
        gateway.advance(0.0, 0.0, ready=False)
        _, body = await scrape(port)
        assert read(body) == (0.0, 0.0)  # the series exist before the first request: nothing arrived

        assert gateway.advance(2.0, 21.0, ready=False) == 0.0  # 42 requests, no pod Ready: all held
        assert gateway.advance(3.0, 21.0, ready=False) == 0.0
        content_type, body = await scrape(port)
        assert content_type.startswith("text/plain; version=0.0.4")
        assert read(body) == (63.0, 63.0)  # the arrivals (no healthy upstream) and the held gauge
        assert 'envoy_cluster_upstream_cx_none_healthy{envoy_cluster_name="llm"} 63\n' in body
        assert 'envoy_cluster_upstream_rq_total{envoy_cluster_name="llm"} 0\n' in body
        assert 'envoy_cluster_upstream_rq_pending_active{envoy_cluster_name="llm"} 63\n' in body
        assert gateway.scrapes == 2
    finally:
        await gateway.stop()
    stats = gateway.stats()
    assert (stats.first_arrival, stats.max_held, stats.timed_out, stats.released) == (2.0, 63.0, 0.0, 0.0)


def test_once_a_pod_is_ready_the_held_requests_are_handed_on_and_new_ones_pass() -> None:
    gateway = DemoGateway("llm")
    gateway.advance(10.0, 0.0, ready=False)
    gateway.advance(12.0, 20.0, ready=False)
    gateway.advance(14.0, 20.0, ready=False)
    assert gateway.held == 80.0
    assert gateway.advance(15.0, 20.0, ready=True) == 80.0  # all of them, at once, to the router
    assert gateway.held == 0.0
    assert gateway.advance(16.0, 20.0, ready=True) == 0.0  # the demand itself goes on as it arrives
    assert read(gateway.exposition()) == (120.0, 0.0)  # each request counted once, when it arrived
    stats = gateway.stats()
    assert (stats.arrived, stats.released, stats.longest_wait) == (120.0, 80.0, 3.0)


def test_a_request_held_longer_than_the_timeout_is_dropped_and_counted() -> None:
    gateway = DemoGateway("llm", hold_timeout_s=60.0)
    gateway.advance(0.0, 0.0, ready=False)
    gateway.advance(1.0, 30.0, ready=False)  # 30 held from t=1
    gateway.advance(50.0, 0.0, ready=False)
    assert gateway.held == 30.0
    gateway.advance(61.5, 0.0, ready=False)  # waited 60.5 s: their clients gave up
    assert gateway.held == 0.0
    assert 'envoy_cluster_upstream_rq_timeout{envoy_cluster_name="llm"} 30\n' in gateway.exposition()
    assert read(gateway.exposition()) == (30.0, 0.0)  # they arrived: the counter keeps them
    assert gateway.advance(62.0, 0.0, ready=True) == 0.0  # nothing left to hand on
    assert gateway.stats().timed_out == 30.0


async def test_the_scaler_finds_the_gateway_through_the_demo_apis_service_and_endpoint_slice(
    socket_dir: Path,
) -> None:
    """The demo announces the gateway as a cluster would: Service ``demo/llm-gateway`` → its EndpointSlice
    → the loopback port it serves on; ``requestPath`` names the Service, never the address."""
    cluster = DemoCluster(
        socket_dir, ["node-a"], gpus_per_node=1, capacity_per_replica=10.0, pending_s=1.5, loading_s=2.5,
        initial_replicas=0, engines=True, gateway=True,
    )  # fmt: skip
    await cluster.start()
    try:
        assert cluster.gateway is not None
        ref, problem = parse_ref(request_path())
        assert problem is None and ref is not None
        assert (ref.service, ref.port, ref.path) == (GATEWAY_SERVICE, GATEWAY_PORT, ADMIN_PATH)
        api = await api_client_from(str(cluster.kubeconfig), in_cluster=False)
        try:
            # a Service without a selector (the gateway is no pod): read as the demo's scaler reads it, where
            # --request-path-manual-endpoints allows it
            found = await resolve_endpoints(api, NAMESPACE, ref.service, ref.port, manual_endpoints=True)
        finally:
            await api.close()
        assert found.addresses == (f"127.0.0.1:{cluster.gateway.port}",)
    finally:
        await cluster.stop()


async def test_the_first_ready_pod_gets_what_the_gateway_held(socket_dir: Path) -> None:
    cluster = DemoCluster(
        socket_dir, ["node-a"], gpus_per_node=1, capacity_per_replica=10.0, pending_s=1.0, loading_s=1.0,
        initial_replicas=0, engines=True, gateway=True,
    )  # fmt: skip
    await cluster.start()
    try:
        assert cluster.engines is not None and cluster.gateway is not None
        for t in (0.0, 1.0, 2.0, 3.0):  # 40 req/s for 3 s, no replica
            cluster.tick(t, 40.0)
        assert cluster.held() == pytest.approx(120.0)
        assert cluster.queue() == 0.0
        cluster.wanted = 1  # KEDA's activation
        cluster.tick(3.5, 0.0)  # Pending, then loading: still held
        assert cluster.held() == pytest.approx(120.0)
        cluster.tick(5.6, 0.0)  # Ready: handed on
        assert cluster.held() == 0.0
        (pod,) = cluster.pods
        assert cluster.engines.load_of(pod.name) == pytest.approx(120.0, abs=1.0)  # less what it served
        assert cluster.first_ready_at == pytest.approx(5.5)
    finally:
        await cluster.stop()
