"""The mock vLLM engine: every default series of vLLM's PrometheusStatLogger under vLLM's names, types and
buckets, and a queue that behaves: it grows only when demand exceeds what the pod serves, with the KV cache
and the time to first token following; the series move when vLLM moves them (the time to first token as a
request leaves the queue, the queue time as it finishes; a client that gives up counted nowhere). Served over
real HTTP with content negotiation. That these are a real vLLM's: tests/engine/test_mock_matches_real.py."""

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

# vllm/v1/metrics/loggers.py PrometheusStatLogger and perf.py PerfMetricsProm (0.32.0): the families they
# always register, by type (each counter and histogram also has its ``_created`` series)
VLLM_DEFAULT_FAMILIES = {
    "vllm:estimated_flops_per_gpu": "counter",
    "vllm:estimated_read_bytes_per_gpu": "counter",
    "vllm:estimated_write_bytes_per_gpu": "counter",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:prompt_tokens_by_source": "counter",
    "vllm:prompt_tokens_cached": "counter",
    "vllm:prompt_tokens_cached_by_source": "counter",
    "vllm:admission_rejections": "counter",
    "vllm:request_num_preemptions": "histogram",
    "vllm:request_prefill_kv_computed_tokens": "histogram",
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
    # the text format writes each series' _created as a gauge family of its own, as vLLM's (one API server:
    # prometheus_client's default registry) does
    created = {name: f for name, f in fams.items() if name.endswith("_created")}
    fams = {name: f for name, f in fams.items() if name not in created}
    assert {name: f.type for name, f in fams.items()} == VLLM_DEFAULT_FAMILIES  # type: ignore[attr-defined]
    assert set(created) == {f"{n}_created" for n, t in VLLM_DEFAULT_FAMILIES.items() if t != "gauge"}
    for name, f in created.items():
        series = {tuple(sorted(s.labels.items())) for s in f.samples}  # type: ignore[attr-defined]
        base = fams[name.removesuffix("_created")]
        assert series == {
            tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            for s in base.samples  # type: ignore[attr-defined]
        }
        assert {s.value for s in f.samples} == {engine.started}  # type: ignore[attr-defined]
    for name, f in fams.items():
        for s in f.samples:  # type: ignore[attr-defined]
            if name == "vllm:admission_rejections":  # the API server's own: per model, no engine
                assert s.labels["model_name"] in ("a", "b") and "engine" not in s.labels
            elif name == "vllm:cache_config_info":
                assert s.labels["engine"] == "0" and "model_name" not in s.labels
            else:
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


async def test_served_over_http_as_vllm_serves_it_whatever_is_asked() -> None:
    """vLLM 0.32.0 answers ``/metrics`` with the text format whatever the ``Accept`` header asks
    (prometheus-fastapi-instrumentator's handler; tests/engine/test_mock_matches_real.py); so does the mock.
    ``exposition(accept)`` still negotiates, for a test or benchmark that needs an OpenMetrics body."""
    clock = Clock()
    engine = MockEngine(MockEngineConfig(models=("a",)), demand=lambda t: 2.0, clock=clock)
    server = await start_mock_engine(engine)
    accept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8"
    try:
        clock.now += 10
        async with aiohttp.ClientSession() as session:
            for headers in ({}, {"Accept": accept}):
                async with session.get(server.url, headers=headers) as r:
                    assert (
                        r.status == 200
                        and r.headers["Content-Type"] == "text/plain; version=1.0.0; charset=utf-8"
                    )
                    text = await r.text()
                in_text = {f.name for f in text_string_to_metric_families(text)}
                assert {n for n in in_text if not n.endswith("_created")} == set(VLLM_DEFAULT_FAMILIES)
        assert server.scrapes == 2
    finally:
        await server.close()
    body, content_type = engine.exposition(accept)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    # OpenMetrics keeps each _created sample in its family
    assert {f.name for f in openmetrics_families(body.decode())} == set(VLLM_DEFAULT_FAMILIES)  # type: ignore[no-untyped-call]


def snapshot(engine: MockEngine, model: str) -> dict[str, float]:
    fams = families(engine)

    def total(name: str, **match: str) -> float:
        return sum(
            s.value
            for s in fams[name].samples  # type: ignore[attr-defined]
            if s.labels.get("model_name") == model and all(s.labels.get(k) == v for k, v in match.items())
        )

    return {
        "waiting": total("vllm:num_requests_waiting"),
        "running": total("vllm:num_requests_running"),
        "ttft": total("vllm:time_to_first_token_seconds", le="+Inf"),
        "queue": total("vllm:request_queue_time_seconds", le="+Inf"),
        "queue_sum": next(
            s.value
            for s in fams["vllm:request_queue_time_seconds"].samples  # type: ignore[attr-defined]
            if s.name.endswith("_sum") and s.labels["model_name"] == model
        ),
        "finished": total("vllm:request_success"),
        "aborted": total("vllm:request_success", finished_reason="abort"),
        "prompt": total("vllm:prompt_tokens"),
        "generated": total("vllm:generation_tokens"),
    }


def test_each_series_moves_when_vllm_moves_it() -> None:
    """10 requests at once to 4 sequences: 4 start at once (their prompt counted, their time to first token
    observed), the rest wait. From then on, at every reading: the time-to-first-token count is the requests
    that left the queue, the queue-time count those that finished (observed as they finish, with the wait
    each had: the same waits the time to first token saw, less the prefill), the tokens those the batch has
    generated."""
    clock = Clock()
    config = MockEngineConfig(models=("m",), max_num_seqs=4, service_time_s=2.0, prompt_tokens=10)
    engine = MockEngine(config, clock=clock)
    state = engine.models["m"]
    engine.arrive(10)
    s = snapshot(engine, "m")
    assert (s["waiting"], s["running"], s["ttft"], s["prompt"], s["queue"], s["finished"]) == (
        6,
        4,
        4,
        40,
        0,
        0,
    )
    ahead = 0
    for _ in range(300):
        clock.now += 0.1
        s = snapshot(engine, "m")
        assert s["ttft"] == math.floor(state.started + 1e-9) and s["prompt"] == math.floor(
            10 * state.started + 1e-9
        )
        assert s["queue"] == s["finished"] == math.floor(state.finished + 1e-9)
        assert state.started - state.finished == pytest.approx(state.running)
        assert s["generated"] == math.floor(128 * state.finished + 1e-9)
        ahead += s["ttft"] > s["queue"]
    assert ahead > 0
    assert (s["waiting"], s["running"], s["ttft"], s["queue"], s["finished"]) == (0, 0, 10, 10, 10)
    fams = families(engine)

    def total(name: str) -> float:
        return next(x.value for x in fams[name].samples if x.name == name + "_sum")  # type: ignore[attr-defined]

    waits = total("vllm:request_queue_time_seconds")
    assert waits > 0  # the 6 that queued waited
    assert total("vllm:time_to_first_token_seconds") == pytest.approx(waits + 10 * config.prefill_s, rel=1e-3)


def test_a_client_that_gives_up_is_counted_nowhere() -> None:
    """With ``patience_s``, a request that has waited that long leaves the queue; no series counts it (vLLM
    counts no client's disconnect, ``abort`` included)."""
    clock = Clock()
    config = MockEngineConfig(models=("m",), max_num_seqs=4, service_time_s=2.0, patience_s=1.0)
    engine = MockEngine(config, clock=clock)
    state = engine.models["m"]
    engine.arrive(10)
    clock.now += 1.0
    s = snapshot(engine, "m")
    assert (s["waiting"], s["aborted"]) == (0, 0)  # none waited 1 s: gone
    assert state.abandoned == pytest.approx(10 - state.started) and state.abandoned > 4
    clock.now += 30.0
    s = snapshot(engine, "m")
    assert (s["waiting"], s["running"], s["aborted"]) == (0, 0, 0)
    assert s["finished"] == s["queue"] == s["ttft"] == math.floor(state.finished + 1e-9) < 10
    assert state.finished + state.abandoned == pytest.approx(10)


def test_requests_put_in_or_taken_from_in_system_at_the_next_step() -> None:
    """A caller that changes ``ModelState.in_system`` directly (the demo's gateway releasing what it held, the
    engine-reaction benchmark setting its queue) has the requests it added arrive at the next step, as
    ``arrive`` would have them now, and those it took go, the newest first, counted by no series."""
    clock = Clock()
    engine = MockEngine(MockEngineConfig(models=("m",), max_num_seqs=4, service_time_s=2.0), clock=clock)
    state = engine.models["m"]
    state.in_system += 10
    clock.now += 0.1
    s = snapshot(engine, "m")
    assert (s["waiting"], s["running"], s["ttft"]) == (6, 4, 4)
    state.in_system -= 8  # the 6 waiting, then 2 of the 4 running
    clock.now += 0.1
    s = snapshot(engine, "m")
    assert (s["waiting"], s["aborted"]) == (0, 0) and state.running == pytest.approx(2 - state.finished)
    assert state.abandoned == pytest.approx(8)
    clock.now += 30.0
    s = snapshot(engine, "m")
    assert (s["running"], s["finished"], s["queue"], s["aborted"]) == (0, 2, 2, 0)
