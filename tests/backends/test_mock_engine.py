"""The mock vLLM engine: every default series of vLLM's PrometheusStatLogger under vLLM's names, types and
buckets, and a queue that behaves: it grows only when demand exceeds what the pod serves, with the KV cache
and the time to first token following. Served over real HTTP with content negotiation."""

from __future__ import annotations

import math

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.backends.mock_engine import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    MockEngine,
    MockEngineConfig,
    build_1_2_5_buckets,
    start_mock_engine,
)

# vllm/v1/metrics/loggers.py PrometheusStatLogger (0.11/0.12): the families it always registers, by type
VLLM_DEFAULT_FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:engine_sleep_state": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:external_prefix_cache_queries": "counter",
    "vllm:external_prefix_cache_hits": "counter",
    "vllm:mm_cache_queries": "counter",
    "vllm:mm_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """histogram_quantile over (upper bound, cumulative count)."""
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == math.inf:
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def families(engine: MockEngine) -> dict[str, object]:
    body, _ = engine.exposition()
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def value(engine: MockEngine, name: str, model: str) -> float:
    fam = families(engine)[name]
    return next(s.value for s in fam.samples if s.labels.get("model_name") == model)  # type: ignore[attr-defined]


def ttft_p50(engine: MockEngine, model: str) -> float:
    fam = families(engine)["vllm:time_to_first_token_seconds"]
    buckets = [
        (float(s.labels["le"]), s.value)
        for s in fam.samples  # type: ignore[attr-defined]
        if s.name.endswith("_bucket") and s.labels["model_name"] == model
    ]
    return quantile(sorted(buckets), 0.5)


def test_every_default_vllm_series_with_its_type_labels_and_buckets() -> None:
    clock = Clock()
    engine = MockEngine(MockEngineConfig(models=("a", "b")), demand=lambda t: 5.0, clock=clock)
    clock.now += 20
    fams = families(engine)
    assert {name: f.type for name, f in fams.items()} == VLLM_DEFAULT_FAMILIES  # type: ignore[attr-defined]
    for name, f in fams.items():
        for s in f.samples:  # type: ignore[attr-defined]
            assert not s.name.endswith("_created")  # vLLM's multiprocess collector writes none
            if name != "vllm:cache_config_info":
                assert s.labels["model_name"] in ("a", "b") and s.labels["engine"] == "0"

    def bounds(family: str) -> tuple[float, ...]:
        return tuple(
            float(s.labels["le"])
            for s in fams[family].samples  # type: ignore[attr-defined]
            if s.name.endswith("_bucket") and s.labels["model_name"] == "a"
        )

    assert bounds("vllm:time_to_first_token_seconds") == (*TTFT_BUCKETS, math.inf)
    assert bounds("vllm:inter_token_latency_seconds") == (*ITL_BUCKETS, math.inf)
    assert bounds("vllm:e2e_request_latency_seconds") == (*REQUEST_LATENCY_BUCKETS, math.inf)
    assert bounds("vllm:request_prompt_tokens") == (*map(float, build_1_2_5_buckets(8192)), math.inf)
    assert build_1_2_5_buckets(100) == (1, 2, 5, 10, 20, 50, 100)  # vLLM's docstring example


def test_the_queue_grows_only_above_capacity_and_kv_cache_and_ttft_follow() -> None:
    clock = Clock()
    demand = {"rps": 4.0}
    config = MockEngineConfig(models=("m",), max_num_seqs=32, service_time_s=4.0)  # serves 8 requests/s
    engine = MockEngine(config, demand=lambda t: demand["rps"], clock=clock)
    assert engine.capacity_rps == 8.0
    clock.now += 60
    assert value(engine, "vllm:num_requests_waiting", "m") == 0.0
    running_below = value(engine, "vllm:num_requests_running", "m")
    assert running_below == pytest.approx(16.0, abs=1.0)  # Little: 4 req/s x 4 s
    kv_below = value(engine, "vllm:kv_cache_usage_perc", "m")
    ttft_below = ttft_p50(engine, "m")

    demand["rps"] = 12.0  # 4 requests/s more than it serves
    clock.now += 30
    waiting = value(engine, "vllm:num_requests_waiting", "m")
    assert waiting == pytest.approx(4.0 * 30, rel=0.1)
    assert value(engine, "vllm:num_requests_running", "m") == 32.0
    assert value(engine, "vllm:kv_cache_usage_perc", "m") > kv_below
    clock.now += 30
    assert value(engine, "vllm:num_requests_waiting", "m") > waiting
    assert ttft_p50(engine, "m") > 5 * ttft_below

    demand["rps"] = 0.0  # drains
    clock.now += 300
    assert value(engine, "vllm:num_requests_waiting", "m") == 0.0
    assert value(engine, "vllm:num_requests_running", "m") == 0.0


def test_deterministic_for_a_clock() -> None:
    bodies = []
    for _ in range(2):
        clock = Clock()
        engine = MockEngine(MockEngineConfig(models=("a", "b")), demand=lambda t: 3.0 + t / 10, clock=clock)
        for _ in range(7):
            clock.now += 1.3
            body, _ = engine.exposition()
        bodies.append(body)
    assert bodies[0] == bodies[1]


def test_counters_and_histograms_never_fall() -> None:
    clock = Clock()
    engine = MockEngine(demand=lambda t: 20.0 if t < 30 else 1.0, clock=clock)
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for _ in range(40):
        clock.now += 2
        body, _ = engine.exposition()
        for fam in text_string_to_metric_families(body.decode()):
            if fam.type not in ("counter", "histogram"):
                continue
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                assert s.value >= last.get(key, 0.0), key
                last[key] = s.value


async def test_served_over_http_in_both_formats() -> None:
    clock = Clock()
    engine = MockEngine(MockEngineConfig(models=("a",)), demand=lambda t: 2.0, clock=clock)
    server = await start_mock_engine(engine)
    try:
        clock.now += 10
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url) as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = await r.text()
            accept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8"
            async with session.get(server.url, headers={"Accept": accept}) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
                om = await r.text()
        assert {f.name for f in text_string_to_metric_families(text)} == set(VLLM_DEFAULT_FAMILIES)
        assert {f.name for f in openmetrics_families(om)} == set(VLLM_DEFAULT_FAMILIES)  # type: ignore[no-untyped-call]
        assert server.scrapes == 2
    finally:
        await server.close()
