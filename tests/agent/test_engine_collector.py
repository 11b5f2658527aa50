"""EngineCollector over real HTTP on loopback: a good vLLM pod (the mock engine) beside endpoints that answer
garbage, 10 MB, HTML, a 500, a redirect, nothing for 30 s, duplicate series, NaN, or lack a metric. Each bad
pod's engine data is missing with its reason, counted and logged (rate-limited); the good pod is unaffected;
memory stays bounded."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpuscale.agent.engines.collector import EngineCollector
from gpuscale.agent.engines.scrape import ACCEPT, ScrapeSettings
from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine
from gpuscale.model import EngineMissing, EngineSample, PodInfo


def _full_exposition() -> str:
    """A whole vLLM exposition of model "m" (the mock engine's, 30 s into 6 requests/s)."""
    clock = [1_700_000_000.0]
    engine = MockEngine(MockEngineConfig(models=("m",)), demand=lambda t: 6.0, clock=lambda: clock[0])
    clock[0] += 30
    return engine.exposition()[0].decode()


GOOD = _full_exposition()
WAITING = 'vllm:num_requests_waiting{engine="0",model_name="m"}'
WAITING_LINE = next(line for line in GOOD.splitlines() if line.startswith(WAITING))
RUNNING = float(
    next(line for line in GOOD.splitlines() if line.startswith("vllm:num_requests_running{")).split()[-1]
)
SETTINGS = ScrapeSettings(timeout=0.5, max_body_bytes=4 * 1024 * 1024)


@dataclass
class Bad:
    """One aiohttp server with a route per way to be wrong."""

    port: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    accept: list[str] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)

    def app(self) -> web.Application:
        async def text(body: str, content_type: str = "text/plain; version=0.0.4") -> web.Response:
            return web.Response(body=body.encode(), headers={"Content-Type": content_type})

        async def handle(request: web.Request) -> web.StreamResponse:
            name = request.match_info["name"]
            self.hits[name] = self.hits.get(name, 0) + 1
            self.accept.append(request.headers.get("Accept", ""))
            peer = request.transport.get_extra_info("peername") if request.transport else None
            if peer:
                self.peers.append((name, peer[1]))
            if name == "good":
                return await text(GOOD)
            if name == "garbage":
                return await text("\x00\x01 this is { not [ metrics\nvllm:num_requests_waiting{{{ 3\n")
            if name == "html":
                return await text("<html><body>502 Bad Gateway</body></html>", "text/html; charset=utf-8")
            if name == "html-as-text":
                return await text("<!DOCTYPE html><html><body>login</body></html>")
            if name == "error":
                return web.Response(status=500, text="boom")
            if name == "redirect":
                raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")
            if name == "hang":
                await asyncio.wait_for(self.release.wait(), 30)
                return await text(GOOD)
            if name == "huge":  # 10 MB, chunked: no Content-Length to refuse it by
                response = web.StreamResponse(headers={"Content-Type": "text/plain"})
                await response.prepare(request)
                line = b'vllm:num_requests_waiting{engine="0",model_name="m"} 3\n'
                try:
                    for _ in range(10 * 1024 * 1024 // (len(line) * 100)):
                        await response.write(line * 100)
                except (ConnectionError, RuntimeError):
                    pass
                return response
            if name == "huge-length":
                return web.Response(body=b"#" * (5 * 1024 * 1024), headers={"Content-Type": "text/plain"})
            if name == "duplicate":
                return await text(GOOD + WAITING + " 4\n")
            if name == "nan":
                return await text(GOOD.replace(WAITING_LINE, WAITING + " NaN"))
            if name == "missing":  # no waiting requests series at all
                return await text(GOOD.replace(WAITING_LINE + "\n", ""))
            if name == "json":
                return await text('{"waiting": 3}', "application/json")
            if name == "latin1":
                return web.Response(
                    body='vllm:x{a="é"} 1\n'.encode("latin-1"), headers={"Content-Type": "text/plain"}
                )
            if name == "om-truncated":
                return await text(
                    GOOD.replace(WAITING_LINE, ""), "application/openmetrics-text; version=1.0.0"
                )
            raise web.HTTPNotFound()

        app = web.Application()
        app.router.add_get("/{name}", handle)
        return app


@pytest_asyncio.fixture
async def bad() -> AsyncIterator[Bad]:
    server = Bad()
    sock = socket.create_server(("127.0.0.1", 0))
    server.port = sock.getsockname()[1]
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    yield server
    server.release.set()
    await runner.cleanup()


def pod(name: str, port: int, path: str = "/metrics", uid: str | None = None) -> PodInfo:
    annotations = {"gpuscale.io/metrics-port": str(port), "gpuscale.io/metrics-path": path}
    return PodInfo("ml", name, uid or f"uid-{name}", annotations=annotations, ip="127.0.0.1")


def scrapes(registry: CollectorRegistry) -> dict[str, float]:
    out = {}
    for family in registry.collect():
        if family.name == "gpuscale_agent_engine_scrapes":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[s.labels["result"]] = s.value
    return {k: v for k, v in out.items() if v}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_one_round_every_bad_endpoint_is_missing_with_its_reason(bad: Bad) -> None:
    clock = Clock()
    engine = MockEngine(MockEngineConfig(models=("llama", "qwen")), demand=lambda t: 6.0, clock=clock)
    vllm = await start_mock_engine(engine)
    clock.now += 30
    names = [
        "garbage", "html", "html-as-text", "error", "redirect", "hang", "huge", "huge-length", "duplicate",
        "nan", "missing", "json", "latin1", "om-truncated",
    ]  # fmt: skip
    pods = {("ml", n): pod(n, bad.port, f"/{n}") for n in names}
    pods[("ml", "vllm")] = pod("vllm", vllm.port)
    pods[("ml", "bad-port")] = PodInfo(
        "ml", "bad-port", "u", annotations={"gpuscale.io/metrics-port": "99999"}, ip="127.0.0.1"
    )
    pods[("ml", "no-gpu")] = pod("no-gpu", bad.port, "/good")  # annotated, but holds no GPU of this node
    holders = set(pods) - {("ml", "no-gpu")}
    registry = CollectorRegistry()
    collector = EngineCollector(SETTINGS, registry, clock=clock)
    try:
        results = await collector.scrape_round(pods, holders)
    finally:
        await collector.close()
        await vllm.close()

    good = results.pop(("ml", "vllm"))
    assert isinstance(good, EngineSample) and good.engine == "vllm" and good.notes == ()
    assert [m.model for m in good.models] == ["llama", "qwen"]
    assert all(m.waiting is not None and m.kv_cache_usage is not None for m in good.models)
    assert ("ml", "no-gpu") not in results and "good" not in bad.hits  # never connected to

    partial = {k[1]: results.pop(k) for k in [("ml", "nan"), ("ml", "missing")]}
    for sample in partial.values():
        assert isinstance(sample, EngineSample)
        assert sample.models[0].waiting is None  # absent, never 0
        assert sample.models[0].running == RUNNING and sample.models[0].ttft is not None  # the rest is read
    assert partial["nan"].notes == (f"{WAITING} is NaN",)  # type: ignore[union-attr]
    assert partial["missing"].notes == ("waiting: not exposed (vllm:num_requests_waiting)",)  # type: ignore[union-attr]

    reasons = {k[1]: (r.reason, r.detail) for k, r in results.items() if isinstance(r, EngineMissing)}
    assert len(reasons) == len(results)
    assert {k: v[0] for k, v in reasons.items()} == {
        "garbage": "parse_error",
        "html": "bad_content_type",
        "html-as-text": "no_metrics",
        "error": "http_error",
        "redirect": "http_error",
        "hang": "timeout",  # the server would answer after 30 s: the timeout fired first
        "huge": "too_large",
        "huge-length": "too_large",
        "duplicate": "parse_error",
        "json": "bad_content_type",
        "latin1": "parse_error",
        "om-truncated": "parse_error",
        "bad-port": "no_endpoint",
    }
    assert reasons["hang"][1] == "no complete answer within 0.5s"
    assert reasons["error"][1] == "HTTP 500 Internal Server Error"
    assert reasons["redirect"][1] == (
        'HTTP 302 Found to "http://169.254.169.254/latest/meta-data/": redirects are not followed'
    )
    assert reasons["huge"][1] == "the body is over 4194304 bytes: not read further"
    assert reasons["huge-length"][1] == "Content-Length 5242880 is over 4194304 bytes"
    assert reasons["duplicate"][1] == f"line {GOOD.count(chr(10)) + 1}: series {WAITING} is given twice"
    assert reasons["html"][1] == 'Content-Type "text/html; charset=utf-8" is not a metrics exposition'
    assert (
        reasons["bad-port"][1]
        == 'annotation gpuscale.io/metrics-port value "99999" must be a port number 1-65535'
    )
    assert reasons["om-truncated"][1] == 'an OpenMetrics body must end with "# EOF" (truncated?)'
    assert scrapes(registry) == {
        "ok": 1,
        "partial": 2,
        "parse_error": 4,
        "bad_content_type": 2,
        "no_metrics": 1,
        "http_error": 2,
        "timeout": 1,
        "too_large": 2,
        "no_endpoint": 1,
    }
    assert all(a == ACCEPT for a in bad.accept)


async def test_keep_alive_and_openmetrics_from_a_prometheus_client_engine(bad: Bad) -> None:
    """The mock engine (prometheus_client's negotiation, as vLLM's) answers OpenMetrics to the agent's Accept;
    successive rounds reuse one connection."""
    registry = CollectorRegistry()
    collector = EngineCollector(SETTINGS, registry)
    pods = {("ml", "a"): pod("a", bad.port, "/good")}
    try:
        for _ in range(3):
            results = await collector.scrape_round(pods, set(pods))
            assert isinstance(results[("ml", "a")], EngineSample)
    finally:
        await collector.close()
    ports = {p for name, p in bad.peers if name == "good"}
    assert len(bad.peers) == 3 and len(ports) == 1  # one connection, three requests
    assert len(collector.history(("ml", "a"))) == 3


async def test_memory_is_bounded_and_gone_pods_are_dropped(bad: Bad) -> None:
    clock = Clock()
    collector = EngineCollector(SETTINGS, CollectorRegistry(), history_length=4, clock=clock)
    a, b = ("ml", "a"), ("ml", "b")
    pods = {a: pod("a", bad.port, "/good"), b: pod("b", bad.port, "/error")}
    try:
        for _ in range(6):
            clock.now += 1
            await collector.scrape_round(pods, {a, b})
        assert [s.timestamp for s in collector.history(a)] == [
            clock.now - 3,
            clock.now - 2,
            clock.now - 1,
            clock.now,
        ]
        assert collector.history(b) == ()
        assert set(collector.latest) == {a, b}
        # b stops holding a GPU; a is recreated under the same name (a StatefulSet pod): a new history
        pods[a] = pod("a", bad.port, "/good", uid="uid-a-2")
        clock.now += 1
        await collector.scrape_round(pods, {a})
        assert set(collector.latest) == {a} and len(collector.history(a)) == 1
        assert b not in collector._said and b not in collector._history
    finally:
        await collector.close()


async def test_logs_are_rate_limited_per_pod(bad: Bad, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    collector = EngineCollector(SETTINGS, CollectorRegistry(), say_again_s=300, clock=clock)
    key = ("ml", "a")
    pods = {key: pod("a", bad.port, "/error")}
    caplog.set_level(logging.INFO, logger="gpuscale.agent.engines.collector")
    try:
        for _ in range(10):  # 10 failing rounds, a second apart: one warning
            clock.now += 1
            await collector.scrape_round(pods, {key})
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert [r.getMessage() for r in warnings] == [
            f"pod ml/a: engine metrics at http://127.0.0.1:{bad.port}/error missing, http_error: HTTP 500 "
            "Internal Server Error; its engine signals are missing until they read"
        ]
        clock.now += 300  # still failing 5 minutes later: said again
        await collector.scrape_round(pods, {key})
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
        pods[key] = pod("a", bad.port, "/good")
        await collector.scrape_round(pods, {key})
        assert caplog.records[-1].levelno == logging.INFO
        assert caplog.records[-1].getMessage() == (
            f"pod ml/a: engine metrics at http://127.0.0.1:{bad.port}/good read again (vllm)"
        )
    finally:
        await collector.close()


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    collector = EngineCollector(SETTINGS, CollectorRegistry())
    try:
        results = await collector.scrape_round({("ml", "a"): pod("a", port)}, {("ml", "a")})
    finally:
        await collector.close()
    missing = results[("ml", "a")]
    assert isinstance(missing, EngineMissing) and missing.reason == "connect_error"
    assert missing.detail.startswith("ClientConnectorError: Cannot connect to host 127.0.0.1:")
