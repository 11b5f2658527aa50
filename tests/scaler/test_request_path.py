"""The request path read by the scaler itself: a Service's ready endpoints, each fetched over real HTTP on
loopback, summed; every way a read fails makes the source missing (never 0) and it recovers; where a
ScaledObject may point; and a wake pushed on StreamIsActive from the gateway's held count at zero replicas."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from prometheus_client import CollectorRegistry

from gpuscale.cli.query import _print_explain
from gpuscale.kube._http import KubeApi
from gpuscale.kube.pods import api_client_from
from gpuscale.scaler.metrics import ScalerMetrics
from gpuscale.scaler.requestpath import PathSettings, RequestPaths
from gpuscale.scaler.status import RequestPathNeedsApi
from gpuscale.scaling.metadata import TriggerMetadata, parse_metadata
from gpuscale.scaling.requestpath import demand
from tests.fakes.apiserver import FakeApiServer, write_kubeconfig
from tests.poll import until

from .conftest import TOKEN, Cluster, KedaClient
from .pathrig import Gateway, serve_gateway

FAST = PathSettings(interval_s=0.1, timeout_s=0.3, max_body_bytes=64 * 1024, resolve_every_s=0.2)
MD = {
    "podSelector": "app=llm",
    "targetValue": "60",
    "requestPath": "gateway:http/stats/prometheus",
    "requestPathFormat": "envoy",
    "requestPathMatch": "llm",
}
GPU_ONLY = {k: v for k, v in MD.items() if not k.startswith("requestPath")}


def trigger(**more: str) -> TriggerMetadata:
    return parse_metadata({**MD, **more})


@dataclass
class Rig:
    apiserver: FakeApiServer
    api: KubeApi
    paths: RequestPaths
    registry: CollectorRegistry
    gateways: list[Gateway]

    def reads(self, result: str, namespace: str = "default") -> float:
        labels = {"namespace": namespace, "service": "gateway", "result": result}
        return self.registry.get_sample_value("gpuscale_scaler_request_path_reads_total", labels) or 0.0

    async def reading(self, md: TriggerMetadata, what: str, test: Callable[[Any], bool]) -> Any:
        """Ask for the path (as a call does) until ``test`` holds for it; that path."""
        seen: list[Any] = []

        def check() -> bool:
            seen.append(self.paths.path("default", md))
            return test(seen[-1])

        await until(check, timeout=8, what=what)
        return seen[-1]


@pytest.fixture
async def rig(apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Rig]:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, token=TOKEN)
    api = await api_client_from(str(kubeconfig), in_cluster=False)
    gateways = [Gateway(), Gateway()]
    for g in gateways:
        await g.start()
    registry = CollectorRegistry()
    paths = RequestPaths(FAST, api, metrics=ScalerMetrics(registry))
    try:
        yield Rig(apiserver, api, paths, registry, gateways)
    finally:
        await paths.close()
        for g in gateways:
            await g.stop()
        await api.close()


def newest(path: Any) -> Any:
    return path.readings[-1] if path.readings else None


async def test_a_reading_is_summed_over_the_services_ready_endpoints(rig: Rig) -> None:
    a, b = rig.gateways
    a.arrived["llm"], a.held["llm"] = 10, 1
    b.arrived["llm"], b.held["llm"] = 5, 2
    a.arrived["other"], a.held["other"] = 1000, 1000  # another cluster's series: not the match's
    serve_gateway(rig.apiserver, "default", [a, b])
    md = trigger()
    first = rig.paths.path("default", md)
    assert (first.readings, first.missing) == ((), "not read yet")  # the first call never waits
    assert first.source == "Service default/gateway:http/stats/prometheus (envoy, llm)"
    path = await rig.reading(md, "a reading", lambda p: newest(p) is not None)
    assert (newest(path).arrived, newest(path).held, path.missing) == (15, 3, None)
    a.arrived["llm"] += 20
    path = await rig.reading(md, "a's arrivals", lambda p: newest(p).arrived == 35)
    assert newest(path).held == 3
    # a third replica comes with its own count: no burst, its arrivals count from its first read
    c = Gateway(arrived={"llm": 500}, held={"llm": 4})
    await c.start()
    try:
        serve_gateway(rig.apiserver, "default", [a, b, c])
        path = await rig.reading(md, "the third endpoint", lambda p: newest(p).held == 7)
        assert newest(path).arrived == 35
        c.arrived["llm"] += 6
        await rig.reading(md, "c's arrivals", lambda p: newest(p).arrived == 41)
        pd = demand(rig.paths.path("default", md), time.time(), 60)
        assert pd is not None and pd.held == 7
    finally:
        await c.stop()
    assert rig.reads("ok") > 0


async def test_an_endpoint_that_has_not_served_the_workload_yet_counts_none_and_then_all_it_counts(
    rig: Rig,
) -> None:
    """Gateways make a workload's series at its first request through them: a replica with no series of
    it, beside one that has it, counted none (the source is not missing); when its series appears, every
    request it counts is new."""
    a, b = rig.gateways
    a.arrived["llm"], a.held["llm"] = 10, 0
    b.arrived, b.held = {"chat": 7}, {"chat": 0}
    serve_gateway(rig.apiserver, "default", [a, b])
    md = trigger()
    path = await rig.reading(md, "a reading", lambda p: newest(p) is not None)
    assert (newest(path).arrived, path.missing) == (10, None)
    b.arrived["llm"], b.held["llm"] = 4, 2
    path = await rig.reading(md, "b's first requests", lambda p: newest(p).held == 2)
    assert newest(path).arrived == 14


async def _unreachable(rig: Rig) -> None:
    gone = Gateway()
    await gone.start()
    port = gone.port
    await gone.stop()  # nothing listens there now
    serve_gateway(rig.apiserver, "default", [rig.gateways[0], port])


def _mode(mode: str) -> Callable[[Rig], Any]:
    async def apply(rig: Rig) -> None:
        rig.gateways[1].mode = mode

    return apply


async def _not_ready(rig: Rig) -> None:
    serve_gateway(rig.apiserver, "default", rig.gateways, ready=False)


async def _no_series(rig: Rig) -> None:
    for g in rig.gateways:
        g.arrived, g.held = {"chat": 3}, {"chat": 0}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("break_it", "result", "why"),
    [
        (_unreachable, "connect_error", "endpoint 127.0.0.1:{port}: ClientConnectorError"),
        (_mode("slow"), "timeout", "endpoint 127.0.0.1:{b}: no complete answer within 0.3s"),
        (_mode("garbage"), "parse_error", "endpoint 127.0.0.1:{b}: not a valid exposition: line 1"),
        (
            _mode("huge"),
            "too_large",
            "endpoint 127.0.0.1:{b}: the body is over 65536 bytes: not read further",
        ),
        (_mode("500"), "http_error", "endpoint 127.0.0.1:{b}: HTTP 500 Internal Server Error"),
        (_not_ready, "no_endpoint", "no ready endpoint"),
        (
            _no_series,
            "no_series",
            "endpoint {first}: no series of envoy_cluster_upstream_rq_total, "
            "envoy_cluster_upstream_cx_none_healthy or envoy_cluster_upstream_rq_pending_active with "
            'envoy_cluster_name="llm" or cluster_name="llm" (and 1 more endpoints failing)',
        ),
    ],
    ids=["unreachable", "slow", "garbage", "over-size", "http-500", "no-ready-endpoint", "no-series"],
)
async def test_a_failing_read_is_missing_with_its_reason_never_0_and_recovers(
    rig: Rig, break_it: Callable[[Rig], Any], result: str, why: str
) -> None:
    a, b = rig.gateways
    a.held["llm"] = 2
    serve_gateway(rig.apiserver, "default", [a, b])
    md = trigger()
    await rig.reading(md, "a first reading", lambda p: p.missing is None and newest(p) is not None)
    unreachable_port: list[int] = []
    await break_it(rig)
    if break_it is _unreachable:
        unreachable_port = [
            s["ports"][0]["port"] for (_, n), s in rig.apiserver.endpoint_slices.items() if n == "gateway-1"
        ]
    first = min(f"127.0.0.1:{g.port}" for g in rig.gateways)  # endpoints are read in their order
    expected = why.format(first=first, b=b.port, port=unreachable_port[0] if unreachable_port else 0)
    path = await rig.reading(md, f"missing: {result}", lambda p: p.missing is not None)
    assert path.missing.startswith(expected), path.missing
    assert demand(path, time.time(), 60) is None  # missing: no demand at all, never 0
    assert rig.reads(result) > 0
    # mended: it reads again
    for g in rig.gateways:
        g.mode, g.arrived, g.held = "ok", {"llm": 1}, {"llm": 1}
    serve_gateway(rig.apiserver, "default", rig.gateways)
    # (a round may straddle the mend: wait for one that reads both mended)
    path = await rig.reading(md, "reads again", lambda p: p.missing is None and newest(p).held == 2)
    assert demand(path, time.time(), 60) is not None


async def test_an_externalname_service_is_refused(rig: Rig) -> None:
    rig.apiserver.put_service(
        "default", "gateway", [("http", 9090)], type="ExternalName", external_name="evil.example"
    )
    path = await rig.reading(trigger(), "refused", lambda p: p.missing != "not read yet")
    assert path.missing == (
        'Service default/gateway: is of type ExternalName ("evil.example"), an arbitrary DNS name: the request '
        "path must be a Service with a selector (or, where --request-path-manual-endpoints allows it, "
        "EndpointSlices of its own)"
    )
    assert rig.reads("no_endpoint") > 0
    assert not any(g.requests for g in rig.gateways)


async def test_a_service_without_a_selector_is_read_only_where_the_operator_allows_it(rig: Rig) -> None:
    """Its EndpointSlices are written by hand and can name any address: refused, one line naming the Service
    and the flag, nothing fetched; with --request-path-manual-endpoints, read."""
    a, b = rig.gateways
    a.held["llm"], b.held["llm"] = 1, 2
    serve_gateway(rig.apiserver, "default", [a, b], selector=False)
    path = await rig.reading(trigger(), "refused", lambda p: p.missing != "not read yet")
    assert path.missing == (
        "Service default/gateway: has no selector: its EndpointSlices are written by hand and can name any "
        "address, so the scaler reads such a Service only where the operator allows it "
        "(--request-path-manual-endpoints)"
    )
    assert rig.reads("no_endpoint") > 0
    assert not any(g.requests for g in rig.gateways)
    allowed = RequestPaths(replace(FAST, manual_endpoints=True), rig.api)
    try:
        await until(
            lambda: newest(p := allowed.path("default", trigger())) is not None and p.missing is None,
            timeout=8,
            what="read where allowed",
        )
        assert newest(allowed.path("default", trigger())).held == 3
    finally:
        await allowed.close()


async def test_an_endpoint_slice_of_the_services_name_that_is_not_its_pods_is_never_read(rig: Rig) -> None:
    """Anyone who may write an EndpointSlice in the namespace can label it with the Service's name: its
    endpoints are read only where they are the Service's pods (here ``b`` is not a pod: left out, never
    fetched); none left: missing, saying how many were left out and why."""
    a, b = rig.gateways
    a.held["llm"], b.held["llm"] = 1, 2
    serve_gateway(rig.apiserver, "default", [a])
    rig.apiserver.put_endpoint_slice(
        "default", "rogue", service="gateway", endpoints=[("127.0.0.1", True)], ports=[("http", b.port)]
    )
    md = trigger()
    path = await rig.reading(md, "a reading", lambda p: newest(p) is not None)
    assert (newest(path).held, path.missing) == (1, None)
    rig.apiserver.delete_endpoint_slice("default", "gateway-0")
    path = await rig.reading(md, "left out", lambda p: p.missing is not None)
    assert path.missing == (
        "no ready endpoint: 1 endpoint was left out because it is not the Service's pods (Pods of namespace "
        "default that its selector selects, at their own IPs)"
    )
    assert rig.reads("no_endpoint") > 0
    assert b.requests == 0


async def test_a_service_without_the_port_or_not_there_is_missing(rig: Rig) -> None:
    path = await rig.reading(trigger(), "no Service", lambda p: p.missing != "not read yet")
    assert path.missing == "Service default/gateway: not found"
    serve_gateway(rig.apiserver, "default", rig.gateways)
    md = trigger(requestPath="gateway:9091/stats/prometheus")
    path = await rig.reading(md, "no port", lambda p: p.missing != "not read yet")
    assert path.missing == "Service default/gateway: has no port 9091 (its ports: 9090 (http))"


async def test_an_idle_source_stops_and_sources_are_bounded(rig: Rig) -> None:
    serve_gateway(rig.apiserver, "default", rig.gateways)
    paths = RequestPaths(replace(FAST, idle_after_s=0.3, max_sources=1), rig.api)
    try:
        paths.path("default", trigger())
        other = paths.path("default", trigger(requestPathMatch="chat"))
        assert other.missing == (
            "not read: the scaler reads at most 1 request paths at once, and that many are in use"
        )
        assert len(paths) == 1
        await until(lambda: len(paths) == 0, timeout=5, what="the idle source stops")
        assert paths.path("default", trigger(requestPathMatch="chat")).missing == "not read yet"
    finally:
        await paths.close()


def test_without_the_kubernetes_api_a_request_path_cannot_be_read() -> None:
    with pytest.raises(RequestPathNeedsApi) as e:
        RequestPaths(FAST, None).path("default", trigger())
    assert str(e.value) == (
        'parameter "requestPath" value "gateway:http/stats/prometheus": the request path is a Service, found '
        "through the Kubernetes API, and the scaler has none (start it with --kubeconfig or in a cluster)"
    )


# -- through the real gRPC service ---------------------------------------------------------------------


async def _scaler(cluster: Cluster, **settings: Any) -> Any:
    await cluster.node("node-a", gpus=1)  # an agent, no pod of the workload: zero replicas
    scaler = await cluster.scaler(request_path=replace(FAST, **settings))
    await until(lambda: scaler.view_problem() is None, what="the view is complete")
    return scaler


async def test_another_namespace_needs_the_allowlist(
    cluster: Cluster, keda: Callable[[int], KedaClient], tmp_path: Path
) -> None:
    gateway = Gateway(held={"llm": 3})
    await gateway.start()
    try:
        serve_gateway(cluster.apiserver, "ai", [gateway])
        md = {**MD, "requestPath": "ai/gateway:http/stats/prometheus"}
        scaler = await _scaler(cluster)
        client = keda(scaler.grpc_port)
        expected = (
            'invalid trigger metadata: parameter "requestPath" value "ai/gateway:http/stats/prometheus" names '
            'a Service of namespace "ai", which is not the ScaledObject\'s ("default") nor one the scaler\'s '
            "--request-path-namespaces allows (allowed: none)"
        )
        for call in (client.spec(md), client.metrics(md), client.stub.IsActive(client.ref(md), timeout=5)):
            assert await client.code_of(call) == (grpc.StatusCode.INVALID_ARGUMENT, expected)
        assert gateway.requests == 0
        # another ScaledObject of the same scaler is answered as ever
        assert await client.value(GPU_ONLY, name="fine") == 0
        allowed = await cluster.scaler(request_path=replace(FAST, namespaces=frozenset({"ai", "ml"})))
        client = keda(allowed.grpc_port)
        await until(
            lambda: _active(client, md), timeout=10, what="the allowed gateway's held requests wake it"
        )
        assert gateway.requests > 0
    finally:
        await gateway.stop()


async def test_without_the_api_a_request_path_is_failed_precondition(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await cluster.node("node-a", gpus=1)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: scaler.view_problem() is None, what="the view is complete")
    assert (await client.spec(MD)).metricSpecs  # the spec stands: KEDA's fallback keeps working
    code, details = await client.code_of(client.metrics(MD))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "the Kubernetes API" in details and '"requestPath"' in details
    assert await client.value(GPU_ONLY) == 0


@pytest.mark.timeout(30)
async def test_stream_pushes_a_wake_from_zero_when_the_gateway_holds_a_request(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    gateway = Gateway()
    await gateway.start()
    try:
        serve_gateway(cluster.apiserver, "default", [gateway])
        scaler = await _scaler(cluster, interval_s=0.2)
        client = keda(scaler.grpc_port)
        stream = client.stub.StreamIsActive(client.ref(MD), timeout=20)
        first = await asyncio.wait_for(stream.read(), 10)
        assert first.result is False  # type: ignore[attr-defined]  # read, nothing held: zero replicas stay at zero
        gateway.held["llm"] = 1
        woke = await asyncio.wait_for(stream.read(), 10)  # pushed, not polled: the stream's next message
        stream.cancel()
        assert woke.result is True  # type: ignore[attr-defined]
    finally:
        await gateway.stop()


async def test_explain_shows_the_request_path(
    cluster: Cluster, keda: Callable[[int], KedaClient], capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = Gateway(arrived={"llm": 7}, held={"llm": 2})
    await gateway.start()
    try:
        serve_gateway(cluster.apiserver, "default", [gateway])
        scaler = await _scaler(cluster)
        url = f"http://127.0.0.1:{scaler.metrics_port}/explain"
        query = [("name", "so"), ("namespace", "default"), *(("m", f"{k}={v}") for k, v in MD.items())]

        async def explained() -> dict[str, Any]:
            async with aiohttp.ClientSession() as s, s.get(url, params=query) as r:
                return dict(await r.json())

        await until(lambda: _has_reading(explained()), timeout=10, what="explain shows a reading")
        e = await explained()
        rp = e["requestPath"]
        assert rp["source"] == "Service default/gateway:http/stats/prometheus (envoy, llm)"
        assert rp["endpoints"] == [f"127.0.0.1:{gateway.port}"]
        assert (rp["arrived"], rp["held"], rp["missing"]) == (7, 2, None)
        assert rp["demand"] == pytest.approx(2 / 60 + (rp["rate"] or 0))
        assert 0 <= rp["lastReadingAge"] < 5
        assert e["answer"]["active"] is True
        gauge = scaler.registry.get_sample_value(
            "gpuscale_scaler_request_path_demand", {"namespace": "default", "scaledobject": "so"}
        )
        assert gauge is not None and gauge >= 2 / 60
        _print_explain(e)  # gpuscale query --explain
        printed = capsys.readouterr().out.splitlines()
        assert (
            f"  request path Service default/gateway:http/stats/prometheus (envoy, llm): endpoints "
            f"127.0.0.1:{gateway.port}"
        ) in printed
        assert any(line.startswith("    newest reading ") and "arrived 7, held 2" in line for line in printed)
        await gateway.stop()
        await until(lambda: _missing(explained()), timeout=10, what="explain says it is missing")
        e = await explained()
        labels = {"namespace": "default", "scaledobject": "so"}
        assert scaler.registry.get_sample_value("gpuscale_scaler_request_path_demand", labels) is None
        assert e["requestPath"]["missing"].startswith(f"endpoint 127.0.0.1:{gateway.port}: ")
        _print_explain(e)
        assert (
            f"    missing (not counted, never as 0): endpoint 127.0.0.1:{gateway.port}: "
            in capsys.readouterr().out
        )
    finally:
        await gateway.stop()


async def _active(client: KedaClient, md: dict[str, str]) -> bool:
    try:
        return await client.active(md)
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.UNAVAILABLE, e.details()  # not read yet
        return False


async def _has_reading(explained: Any) -> bool:
    rp = (await explained).get("requestPath") or {}
    return rp.get("held") is not None and rp.get("missing") is None


async def _missing(explained: Any) -> bool:
    return bool(((await explained).get("requestPath") or {}).get("missing"))


# -- the scaler's flags ----------------------------------------------------------------------------------


def _settings(argv: list[str]) -> PathSettings:
    import argparse

    from gpuscale.cli import scaler as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return cli.settings_from_args(
        parser.parse_args(["scaler", "--agents", "127.0.0.1:6000", *argv])
    ).request_path


def test_request_path_flags_and_their_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSCALE_REQUEST_PATH_NAMESPACES", raising=False)
    monkeypatch.delenv("GPUSCALE_REQUEST_PATH_INTERVAL", raising=False)
    monkeypatch.delenv("GPUSCALE_REQUEST_PATH_MANUAL_ENDPOINTS", raising=False)
    default = _settings([])
    assert (default.namespaces, default.interval_s, default.timeout_s) == (frozenset(), 1.0, 0.8)
    assert default.manual_endpoints is False
    given = _settings(["--request-path-namespaces", "ai, gateways", "--request-path-interval", "2"])
    assert (given.namespaces, given.interval_s, given.timeout_s) == (frozenset({"ai", "gateways"}), 2.0, 1.6)
    assert _settings(["--request-path-manual-endpoints"]).manual_endpoints is True
    monkeypatch.setenv("GPUSCALE_REQUEST_PATH_NAMESPACES", "ingress")
    assert _settings([]).namespaces == frozenset({"ingress"})
    monkeypatch.setenv("GPUSCALE_REQUEST_PATH_MANUAL_ENDPOINTS", "true")
    assert _settings([]).manual_endpoints is True
    monkeypatch.setenv("GPUSCALE_REQUEST_PATH_MANUAL_ENDPOINTS", "off")
    assert _settings([]).manual_endpoints is False
    assert _settings(["--request-path-manual-endpoints"]).manual_endpoints is True  # the flag wins


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--request-path-namespaces", "ai,Bad_NS"],
            '--request-path-namespaces "ai,Bad_NS": "Bad_NS" is not a namespace name (1 to 63 lowercase letters, '
            "digits and '-', starting and ending with a letter or digit)",
        ),
        (["--request-path-interval", "0"], '--request-path-interval "0" must be from 0.1 to 2 seconds'),
        (
            ["GPUSCALE_REQUEST_PATH_MANUAL_ENDPOINTS=maybe"],
            'GPUSCALE_REQUEST_PATH_MANUAL_ENDPOINTS "maybe" must be true or false (also 1/0, yes/no, on/off; '
            "empty: false)",
        ),
    ],
)
def test_bad_request_path_flags_are_one_line(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuscale.errors import UsageError

    for variable in [a for a in argv if a.startswith("GPUSCALE_")]:
        name, value = variable.split("=", 1)
        monkeypatch.setenv(name, value)
        argv = [a for a in argv if a != variable]

    with pytest.raises(UsageError) as e:
        _settings(argv)
    assert str(e.value) == message
