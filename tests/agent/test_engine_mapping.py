"""Engine detection and mapping: each supported engine's exposition into an EngineSample, and every value
that cannot be right made absent with a note, never 0.

The SGLang, TGI and Triton expositions below are written from each engine's own metric definitions (names,
types, labels as their source declares them: sgl-project/sglang python/sglang/srt/metrics/collector.py
@00ae9c1590d2; huggingface/text-generation-inference docs/source/reference/metrics.md @53fdbe617d4f;
triton-inference-server/server docs/user_guide/metrics.md @067c1e968356 and tensorrtllm_backend
inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc @7f9aa4680aaf). The vLLM one comes
from the mock engine, which follows vllm/v1/metrics/loggers.py."""

from __future__ import annotations

import math

import pytest

from gpuscale.agent.engines.mapping import ENGINES, detect, map_exposition, selection
from gpuscale.backends.mock_engine import TTFT_BUCKETS, MockEngine, MockEngineConfig
from gpuscale.exposition import parse
from gpuscale.model import BucketCounts, EngineSample, ModelSignals


def sample_of(text: str, engine: str | None = None) -> EngineSample | None:
    specs = detect(text)
    if engine is not None:
        assert [s.name for s in specs][:1] == [engine]
    for spec in specs:
        found = map_exposition(spec, parse(text, selection(spec)), 100.0)
        if found is not None:
            return found
    return None


def hist(bounds: tuple[float, ...], counts: tuple[float, ...]) -> BucketCounts:
    return BucketCounts((*bounds, math.inf), counts)


def test_vllm_from_the_mock_engine() -> None:
    clock = [1000.0]
    engine = MockEngine(
        MockEngineConfig(models=("llama", "qwen"), weights=(3.0, 1.0)),
        demand=lambda t: 16.0,
        clock=lambda: clock[0],
    )
    clock[0] += 30
    body, _ = engine.exposition()
    got = sample_of(body.decode(), "vllm")
    assert got is not None and got.engine == "vllm" and got.notes == () and got.timestamp == 100.0
    assert [m.model for m in got.models] == ["llama", "qwen"]
    for signals in got.models:
        state = engine.models[signals.model]
        assert signals.waiting == round(state.waiting)
        assert signals.running == round(state.running)
        assert signals.kv_cache_usage == pytest.approx(100 * state.kv_cache_usage)
        assert signals.prompt_tokens == math.floor(state.prompt_tokens + 1e-9)
        assert signals.generation_tokens == math.floor(state.generation_tokens + 1e-9)
        assert signals.ttft is not None and signals.ttft.bounds == (*TTFT_BUCKETS, math.inf)
        # observed as each request gets its first token, as vLLM does: more than have finished
        assert signals.ttft.total == math.floor(state.started + 1e-9) > math.floor(state.finished + 1e-9)
        # vllm:request_success_total summed over finished_reason: every request the engine finished
        assert signals.requests_finished == math.floor(state.finished + 1e-9) > 0
        # vllm:request_queue_time_seconds' _sum and _count: the requests that finished, and their wait in the
        # queue (observed as they finish, as vLLM does)
        assert signals.queue_time_count == math.floor(state.finished + 1e-9)
        assert signals.queue_time_sum is not None and signals.queue_time_sum >= 0
        assert signals.itl is not None and signals.itl.total > 0
    llama, qwen = got.models
    assert (
        llama.waiting is not None and qwen.waiting is not None and llama.waiting > qwen.waiting
    )  # 3:1 demand


VLLM_09 = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 6.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 8.0
vllm:num_requests_running{engine="1",model_name="m"} 8.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.7
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 3.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.2
vllm:time_per_output_token_seconds_bucket{engine="1",le="0.01",model_name="m"} 2.0
vllm:time_per_output_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0
vllm:time_per_output_token_seconds_count{engine="1",model_name="m"} 2.0
vllm:time_per_output_token_seconds_sum{engine="1",model_name="m"} 0.01
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 100.0
vllm:generation_tokens_total{engine="1",model_name="m"} 50.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 5.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="m"} 0.0
vllm:request_success_total{engine="1",finished_reason="abort",model_name="m"} 2.0
"""


def test_vllm_before_0_9_and_data_parallel_engines() -> None:
    """The older names are read when the new ones are absent; data-parallel engines (``engine`` label) add
    up, and their KV-cache fills average (vLLM's own aggregate does so)."""
    got = sample_of(VLLM_09, "vllm")
    assert got is not None
    assert got.models == (
        ModelSignals(
            "m",
            waiting=10.0,
            running=16.0,
            kv_cache_usage=pytest.approx(60.0),  # type: ignore[arg-type]
            itl=hist((0.01,), (3.0, 5.0)),
            generation_tokens=150.0,
            requests_finished=17.0,  # every finished_reason of both engines
            requests_aborted=3.0,  # the abort series alone, of both engines: 17 finished, 14 served
        ),
    )
    assert got.notes == (
        "ttft: not exposed (vllm:time_to_first_token_seconds)",
        "prompt_tokens: not exposed (vllm:prompt_tokens_total)",
    )


def test_the_new_vllm_names_win_over_the_old() -> None:
    text = VLLM_09 + (
        '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.3\n'
    )
    got = sample_of(text, "vllm")
    assert got is not None and got.models[0].kv_cache_usage == pytest.approx(20.0)


SGLANG = """\
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 5.0
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 5.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 10.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 12.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.4
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.6
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} 9000.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen"} 3000.0
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="qwen"} 6.0
# TYPE sglang:num_aborted_requests_total counter
sglang:num_aborted_requests_total{model_name="qwen"} 2.0
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 2.0
sglang:time_to_first_token_seconds_bucket{le="0.2",model_name="qwen"} 5.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"} 6.0
sglang:time_to_first_token_seconds_sum{model_name="qwen"} 1.1
sglang:time_to_first_token_seconds_count{model_name="qwen"} 6.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.002",model_name="qwen"} 0.0
sglang:inter_token_latency_seconds_bucket{le="0.004",model_name="qwen"} 40.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="qwen"} 50.0
sglang:inter_token_latency_seconds_sum{model_name="qwen"} 0.2
sglang:inter_token_latency_seconds_count{model_name="qwen"} 50.0
"""


def test_sglang() -> None:
    """Tensor-parallel ranks of one scheduler report the same queue (the maximum is read, not the sum);
    data-parallel ranks are separate schedulers (summed)."""
    got = sample_of(SGLANG, "sglang")
    assert got is not None and got.engine == "sglang" and got.notes == ()
    assert got.models == (
        ModelSignals(
            "qwen",
            waiting=8.0,
            running=22.0,
            kv_cache_usage=pytest.approx(50.0),  # type: ignore[arg-type]
            ttft=hist((0.1, 0.2), (2.0, 5.0, 6.0)),
            itl=hist((0.002, 0.004), (0.0, 40.0, 50.0)),
            prompt_tokens=9000.0,
            generation_tokens=3000.0,
            requests_finished=6.0,  # finished; the aborted ones are not added
        ),
    )


TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 7
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 16
# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="0.005"} 0
tgi_request_mean_time_per_token_duration_bucket{le="0.01"} 3
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 4
tgi_request_mean_time_per_token_duration_sum 0.05
tgi_request_mean_time_per_token_duration_count 4
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="+Inf"} 4
tgi_request_generated_tokens_sum 512
tgi_request_generated_tokens_count 4
# TYPE tgi_request_count counter
tgi_request_count 9
# TYPE tgi_request_success counter
tgi_request_success 4
# TYPE tgi_request_failure counter
tgi_request_failure{err="validation"} 5
"""


def test_tgi_has_one_unnamed_model_and_no_ttft_or_kv_cache() -> None:
    got = sample_of(TGI, "tgi")
    assert got is not None
    assert got.models == (
        ModelSignals(
            "",
            waiting=7.0,
            running=16.0,
            itl=hist((0.005, 0.01), (0.0, 3.0, 4.0)),
            generation_tokens=512.0,
            requests_finished=4.0,  # tgi_request_success: the failed (validation) ones never queued
        ),
    )
    assert got.notes == ("prompt_tokens: not exposed (tgi_request_input_length_sum)",)


TRITON = """\
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="ensemble",version="1"} 2
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 3
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="tensorrt_llm",version="1"} 1200
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 40
nv_inference_request_success{model="tensorrt_llm",version="1"} 30
nv_inference_request_success{model="tensorrt_llm",version="2"} 10
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 6
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 9
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 1560
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 4680
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 6240
# HELP nv_inference_first_response_histogram_ms Duration from request to first response in milliseconds
# TYPE nv_inference_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="100"} 4
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="500"} 9
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="+Inf"} 10
nv_inference_first_response_histogram_ms_sum{model="tensorrt_llm",version="1"} 2500
nv_inference_first_response_histogram_ms_count{model="tensorrt_llm",version="1"} 10
"""


def test_triton_tensorrt_llm() -> None:
    """Per Triton model; KV-cache fill from used over max blocks; first-response times in milliseconds read
    as seconds."""
    got = sample_of(TRITON, "triton")
    assert got is not None and got.notes == ()
    assert got.models == (
        ModelSignals("ensemble", waiting=2.0, requests_finished=40.0),
        ModelSignals(
            "tensorrt_llm",
            waiting=3.0,
            running=6.0,
            kv_cache_usage=25.0,
            ttft=hist((0.1, 0.5), (4.0, 9.0, 10.0)),
            requests_finished=40.0,  # both versions
        ),
    )


def test_a_newer_tensorrt_llm_backend_names_its_waiting_requests() -> None:
    text = TRITON.replace('request_type="context",version="1"} 1', 'request_type="waiting",version="1"} 11')
    got = sample_of(text, "triton")
    assert got is not None and got.model("tensorrt_llm") is not None
    assert got.model("tensorrt_llm").waiting == 11.0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("line", "field", "note"),
    [
        (
            'vllm:num_requests_waiting{engine="0",model_name="m"} NaN',
            "waiting",
            'vllm:num_requests_waiting{engine="0",model_name="m"} is NaN',
        ),
        (
            'vllm:num_requests_waiting{engine="0",model_name="m"} -1',
            "waiting",
            'vllm:num_requests_waiting{engine="0",model_name="m"} is negative (-1)',
        ),
        (
            'vllm:num_requests_running{engine="0",model_name="m"} +Inf',
            "running",
            'vllm:num_requests_running{engine="0",model_name="m"} is infinite',
        ),
        (
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 1.5',
            "kv_cache_usage",
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} is 1.5, above 1 (it is a fraction 0-1)',
        ),
        (
            'vllm:generation_tokens_total{engine="0",model_name="m"} NaN',
            "generation_tokens",
            'vllm:generation_tokens_total{engine="0",model_name="m"} is NaN',
        ),
        (
            'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} -3',
            "requests_finished",
            'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} is negative (-3)',
        ),
    ],
)
def test_a_value_that_cannot_be_right_is_absent_with_a_note(line: str, field: str, note: str) -> None:
    good = {
        "waiting": 'vllm:num_requests_waiting{engine="0",model_name="m"} 2',
        "running": 'vllm:num_requests_running{engine="0",model_name="m"} 3',
        "kv_cache_usage": 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5',
        "generation_tokens": 'vllm:generation_tokens_total{engine="0",model_name="m"} 10',
        "requests_finished": 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4',
    }
    good[field] = line
    got = sample_of("\n".join(good.values()) + "\n", "vllm")
    assert got is not None
    (signals,) = got.models
    assert getattr(signals, field) is None
    others = {f: getattr(signals, f) for f in good}
    assert [f for f, v in others.items() if v is None] == [field]  # the others are unaffected
    assert note in got.notes


@pytest.mark.parametrize(
    ("buckets", "note"),
    [
        ('le="0.1"} 5\n', "vllm:time_to_first_token_seconds of model 'm' has no +Inf bucket"),
        (
            'le="0.1"} 5\nvllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4\n',
            "vllm:time_to_first_token_seconds of model 'm': cumulative bucket counts fall",
        ),
        (
            'le="0.1"} NaN\nvllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4\n',
            'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} cannot be right (le or count)',
        ),
        (
            'le="fast"} 1\nvllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4\n',
            'vllm:time_to_first_token_seconds_bucket{le="fast",model_name="m"} cannot be right (le or count)',
        ),
    ],
)
def test_a_broken_histogram_is_absent_with_a_note(buckets: str, note: str) -> None:
    text = (
        'vllm:num_requests_waiting{model_name="m"} 1\nvllm:time_to_first_token_seconds_bucket{model_name="m",'
        + buckets
    )
    got = sample_of(text, "vllm")
    assert got is not None and got.models[0].ttft is None and got.models[0].waiting == 1.0
    assert note in got.notes


def test_no_engine_series_is_no_sample() -> None:
    assert detect("# HELP process_cpu_seconds_total CPU\nprocess_cpu_seconds_total 1.0\n") == []
    assert sample_of("<html><body>502 Bad Gateway</body></html>") is None
    # the prefix alone is not enough: no series of a known name
    assert sample_of("vllm:something_else 1\n") is None


def test_every_engine_reads_its_own_names_only() -> None:
    names = [spec.families() for spec in ENGINES]
    for i, fams in enumerate(names):
        for j, other in enumerate(names):
            if i != j:
                assert not fams & other
