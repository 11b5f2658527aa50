"""The Grafana dashboard names only series that exist: every ``gpuscale_*`` one is served by a real agent's or
scaler's ``/metrics``, every vLLM one by the mock engine (held to vLLM's own names in
tests/agent/test_engine_mapping.py); and it has the panels a user of LLM serving looks for. That the queries
return what they say, in a real Prometheus: tests/deploy/test_promql.py."""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest

from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig
from gpuscale.httpserve import add_self_metrics
from gpuscale.scaler.metrics import ScalerMetrics
from tests.conftest import AgentFactory

from .helpers import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "gpuscale.json"
ENGINE_PANELS = {
    "Waiting requests per pod": "vllm[:_]num_requests_waiting",
    "KV-cache fill per pod": "vllm[:_]kv_cache_usage_perc",
    "Time to first token p95 per namespace": "vllm[:_]time_to_first_token_seconds_bucket",
    "Requests per second per namespace: finished and arriving": "vllm[:_]request_success_total",
    "Learned cold start per workload": "gpuscale_workload_cold_start_seconds",
    "Decisions taken per ScaledObject": "gpuscale_scaler_decisions_total",
    "Request path demand per ScaledObject": "gpuscale_scaler_request_path_demand",
    "Request path reads by result": "gpuscale_scaler_request_path_reads_total",
    "Learned replica capacity per workload": "gpuscale_workload_replica_capacity_requests_per_second",
}


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return panels


def _exprs() -> list[str]:
    return [t["expr"] for p in _panels() for t in p.get("targets", [])]


def _sample_names(exposition: str) -> set[str]:
    """The sample names an exposition serves, also for families with no sample yet (from ``# TYPE``)."""
    names = {line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if line and line[0] != "#"}
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.update(name + s for s in ("", *suffixes.get(kind, ())))  # the text format: x_total
    return names


async def test_every_gpuscale_series_of_the_dashboard_is_served(start_agent: AgentFactory) -> None:
    agent = await start_agent("constant:50", gpus=1)
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{agent.metrics_port}/metrics") as r,
    ):
        served = _sample_names(await r.text())
    registry = CollectorRegistry()
    add_self_metrics(registry, "scaler")
    ScalerMetrics(registry)
    served |= _sample_names(generate_latest(registry).decode())
    used = {name for expr in _exprs() for name in re.findall(r"\bgpuscale_[a-z_]+", expr)}
    assert used - served == set()
    assert {"gpuscale_scaler_decisions_total", "gpuscale_workload_cold_start_seconds"} <= used


def test_every_engine_series_of_the_dashboard_is_vllms() -> None:
    clock = [1000.0]
    engine = MockEngine(MockEngineConfig(), lambda t: 12.0, clock=lambda: clock[0])
    clock[0] += 10.0
    served = _sample_names(engine.exposition()[0].decode())
    used = {m.replace("[:_]", ":", 1) for e in _exprs() for m in re.findall(r"vllm\[:_\][a-z_]+", e)}
    assert used and used - served == set()


def test_the_engine_panels_are_there() -> None:
    found = {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in _panels()}
    for title, series in ENGINE_PANELS.items():
        assert title in found, title
        assert any(series in expr for expr in found[title]), (title, found[title])
