"""vLLM's default ``/metrics`` families, filled from the mock engine's queue model.

Every ``vllm:`` family a vLLM V1 engine registers by default (``vllm/v1/metrics/loggers.py``
``PrometheusStatLogger`` and ``perf.py`` ``PerfMetricsProm``, vLLM 0.32.0), in the order vLLM serves them,
under its names, types, help texts, labels (``model_name``, ``engine``) and histogram buckets, with the
``_created`` series prometheus_client's default registry writes for every counter and histogram. The state
comes from ``_mock_engine_queue``; serving it is ``mock_engine``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from ._mock_engine_queue import (
    CACHE_HIT_SOURCES,
    FINISH_REASONS,
    PREFIX_HIT_SHARE,
    SLEEP_STATES,
    WAITING_REASONS,
    MockEngineConfig,
    ModelState,
    whole,
)

if TYPE_CHECKING:
    from .mock_engine import MockEngine

__all__ = ["VllmCollector"]

ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")

# vLLM's default families (vllm/v1/metrics/loggers.py, perf.py), in the order vLLM 0.32.0 serves them: name,
# help, and what fills it.
_Value = Callable[[ModelState], float]
_PERF = "(for Model Flops Utilization calculations)."
_PERF_COUNTERS: tuple[tuple[str, str, _Value], ...] = (
    (
        "vllm:estimated_flops_per_gpu",
        f"Estimated number of floating point operations per GPU {_PERF}",
        lambda s: 0.0,
    ),
    (
        "vllm:estimated_read_bytes_per_gpu",
        f"Estimated number of bytes read from memory per GPU {_PERF}",
        lambda s: 0.0,
    ),
    (
        "vllm:estimated_write_bytes_per_gpu",
        f"Estimated number of bytes written to memory per GPU {_PERF}",
        lambda s: 0.0,
    ),
)
_WAITING_BY_REASON = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
    "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all "
    "reasons equals vllm:num_requests_waiting."
)
_SLEEP_DOC = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)
_CACHED_BY_SOURCE = (
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to "
    "DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at "
    "admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits."
)
_COUNTERS: tuple[tuple[str, str, _Value], ...] = (
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        lambda s: s.prompt_tokens,
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        lambda s: s.prompt_tokens * PREFIX_HIT_SHARE,
    ),
    (
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of "
        "queried tokens.",
        lambda s: 0.0,
    ),
    (
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of "
        "cached tokens.",
        lambda s: 0.0,
    ),
    (
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        lambda s: 0.0,
    ),
    ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", lambda s: 0.0),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda s: s.preemptions),
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda s: s.prompt_tokens),
)
_PROMPT_BY_SOURCE: dict[str, _Value] = {
    "local_compute": lambda s: s.prompt_tokens - s.prompt_tokens * PREFIX_HIT_SHARE,
    "local_cache_hit": lambda s: s.prompt_tokens * PREFIX_HIT_SHARE,
    "external_kv_transfer": lambda s: 0.0,
}
_HISTOGRAMS = {
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested generation tokens.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_num_preemptions": "Histogram of the number of times a request was preempted.",
    "vllm:request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens)."
    ),
}
_LABELS = ["model_name", "engine"]


def _cache_config(config: MockEngineConfig) -> dict[str, str]:
    """``vllm:cache_config_info``'s labels: vLLM 0.32.0's ``CacheConfig`` fields as ``str()`` writes them."""
    return {
        "block_size": str(config.block_size),
        "gpu_memory_utilization": "0.9",
        "swa_bounded_replay": "True",
        "cache_dtype": "auto",
        "is_attention_free": "False",
        "num_gpu_blocks_override": "None",
        "sliding_window": "None",
        "enable_prefix_caching": "True",
        "prefix_caching_hash_algo": "sha256",
        "prefix_cache_retention_interval": "0",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "use_replayssm": "False",
        "replayssm_buffer_len": "16",
        "use_kda_recoverssm": "False",
        "enable_mamba_shared_prefix_checkpoint": "False",
        "kv_cache_memory_bytes": "None",
        "kv_offloading_size": "None",
        "kv_offloading_backend": "native",
        "kv_cache_dtype_skip_layers": "[]",
        "user_specified_block_size": "False",
        "_block_size_resolved": "True",
        "num_gpu_blocks": "None",
        "num_cpu_blocks": "None",
        "kv_sharing_fast_prefill": "False",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": "None",
        "kv_cache_size_tokens": "None",
        "effective_attention_block_size": str(config.block_size),
        "hash_block_size": "None",
        "cache_hit_alignment_tokens": "None",
        "prefix_match_unit": "None",
        "mamba_page_size_padded": "None",
        "skip_page_size_padded": "None",
        "engine": "0",
    }


def _created(family: Metric, labels: dict[str, str], created: float) -> None:
    """The ``_created`` sample prometheus_client's default registry writes for each counter and histogram
    series: when the series was made (the engine's start)."""
    family.samples.append(Sample(family.name + "_created", labels, created))


class VllmCollector(Collector):
    """The families vLLM's ``PrometheusStatLogger`` defines by default, filled from the engine's state (one
    engine index, ``engine="0"``, per model)."""

    def __init__(self, engine: MockEngine) -> None:
        self.engine = engine

    def _counter(
        self, name: str, doc: str, labels: list[str], rows: list[tuple[list[str], float]]
    ) -> CounterMetricFamily:
        counter = CounterMetricFamily(name, doc, labels=labels)
        for values, value in rows:
            counter.add_metric(values, whole(value), created=self.engine.started)
        return counter

    def collect(self) -> Iterator[Metric]:
        states = list(self.engine.models.values())
        yield from self._perf_counters(states)
        yield from self._gauges(states)
        yield from self._token_counters(states)
        yield from self._request_counters(states)
        yield from self._histograms(states)
        yield self._cache_config_info()

    def _perf_counters(self, states: list[ModelState]) -> Iterator[Metric]:
        """The FLOPs and bytes estimates: 0, as on the CPU build."""
        for name, doc, value in _PERF_COUNTERS:
            yield self._counter(name, doc, _LABELS, [([s.name, "0"], value(s)) for s in states])

    def _gauges(self, states: list[ModelState]) -> Iterator[Metric]:
        """The queue and the batch, the engine's sleep state and the KV cache's fill."""
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels=_LABELS
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels=_LABELS
        )
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason", _WAITING_BY_REASON, labels=[*_LABELS, "reason"]
        )
        for s in states:
            running.add_metric([s.name, "0"], float(round(s.running)))
            waiting.add_metric([s.name, "0"], float(round(s.waiting)))
            for reason in WAITING_REASONS:
                by_reason.add_metric(
                    [s.name, "0", reason], float(round(s.waiting)) if reason == "capacity" else 0.0
                )
        yield from (running, waiting, by_reason)
        sleep = GaugeMetricFamily("vllm:engine_sleep_state", _SLEEP_DOC, labels=[*_LABELS, "sleep_state"])
        kv = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=_LABELS
        )
        for s in states:
            for state in SLEEP_STATES:
                sleep.add_metric([s.name, "0", state], 1.0 if state == "awake" else 0.0)
            kv.add_metric([s.name, "0"], s.kv_cache_usage)
        yield from (sleep, kv)

    def _token_counters(self, states: list[ModelState]) -> Iterator[Metric]:
        """The caches' queries and hits, the prompt tokens (by source, cached) and the generation tokens."""
        for name, doc, value in _COUNTERS:
            yield self._counter(name, doc, _LABELS, [([s.name, "0"], value(s)) for s in states])
        yield self._counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [*_LABELS, "source"],
            [([s.name, "0", source], fill(s)) for s in states for source, fill in _PROMPT_BY_SOURCE.items()],
        )
        yield self._counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            _LABELS,
            [([s.name, "0"], s.prompt_tokens * PREFIX_HIT_SHARE) for s in states],
        )
        yield self._counter(
            "vllm:prompt_tokens_cached_by_source",
            _CACHED_BY_SOURCE,
            [*_LABELS, "source"],
            [
                ([s.name, "0", source], s.prompt_tokens * PREFIX_HIT_SHARE if source == "device" else 0.0)
                for s in states
                for source in CACHE_HIT_SOURCES
            ],
        )
        yield self._counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            _LABELS,
            [([s.name, "0"], s.generation_tokens) for s in states],
        )

    def _request_counters(self, states: list[ModelState]) -> Iterator[Metric]:
        """The requests finished, by reason, and those rejected at admission (none)."""
        rows: list[tuple[list[str], float]] = []
        for s in states:
            # a tenth end at max_tokens ("length"), the rest at a stop token; none aborted, none in error: the
            # series sum to the whole requests finished (what the agent reads as requests_finished), each
            # never falling
            length = whole(s.finished * 0.1)
            counts = {"stop": whole(s.finished) - length, "length": length}
            rows += [([s.name, "0", reason], counts.get(reason, 0.0)) for reason in FINISH_REASONS]
        yield self._counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*_LABELS, "finished_reason"],
            rows,
        )
        yield self._counter(  # the API server's, per model: no engine label
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            [([s.name, reason], 0.0) for s in states for reason in ADMISSION_REASONS],
        )

    def _histograms(self, states: list[ModelState]) -> Iterator[Metric]:
        for name, doc in _HISTOGRAMS.items():
            family = HistogramMetricFamily(name, doc, labels=_LABELS)
            for s in states:
                hist = s.histograms[name]
                family.add_metric([s.name, "0"], hist.buckets(), hist.sum)
                _created(family, {"model_name": s.name, "engine": "0"}, self.engine.started)
            yield family

    def _cache_config_info(self) -> Metric:
        labels = _cache_config(self.engine.config)
        info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(labels)
        )
        info.add_metric(list(labels.values()), 1.0)
        return info
