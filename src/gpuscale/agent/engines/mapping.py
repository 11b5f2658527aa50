"""Which engine served an exposition, and what its series say per model: an ``EngineSample``.

Engines are told apart by their metric names (``vllm:``, ``sglang:``, ``tgi_``, ``nv_inference_`` /
``nv_trt_llm_``). Every name below was checked against the engine's own source, cited at each spec:

- **vLLM** (V1 engine): ``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger`` (vllm-project/vllm
  @005a810bc40f, and the 0.11/0.12 version that adds ``vllm:inter_token_latency_seconds`` and hides
  ``vllm:time_per_output_token_seconds``, "Deprecated in 0.11"); labels ``model_name`` and ``engine`` (the
  data-parallel engine index). ``vllm:kv_cache_usage_perc`` is 0-1 despite its name ("1 means 100 percent
  usage"); ``vllm:gpu_cache_usage_perc`` is its name before 0.9 (read when the new one is absent). Finished
  requests: the counter ``vllm:request_success`` (exposed ``vllm:request_success_total``), one series per
  ``finished_reason`` (``str(FinishReason)`` of ``vllm/v1/engine/__init__.py``: ``stop``, ``length``,
  ``abort``, and in newer versions ``error``, ``repetition``), all created at start; summed over the reasons
  (and engines), so every request that left the engine counts, aborted ones as vLLM counts them; the
  ``abort`` series alone is ``requests_aborted`` (finished less aborted: what the engine served). Released
  vLLM (0.10-0.13) moves no series for a client's abort (vllm-project/vllm#31503, #55634, open): such a
  request leaves the waiting and running gauges uncounted.
- **SGLang**: ``python/sglang/srt/metrics/collector.py`` (sgl-project/sglang @00ae9c1590d2):
  ``SchedulerMetricsCollector`` (``sglang:num_queue_reqs``, ``sglang:num_running_reqs``,
  ``sglang:token_usage``: used over total KV-pool tokens, 0-1) with labels ``model_name``, ``engine_type``,
  ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` (and ``dp_rank``); ``TokenizerMetricsCollector``
  (``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``,
  ``sglang:time_to_first_token_seconds``, ``sglang:inter_token_latency_seconds``, and
  ``sglang:num_requests_total``, counted by ``observe_one_finished_request``: the finished requests; the
  aborted ones have their own ``sglang:num_aborted_requests_total``, not read). Reading
  ``sglang:token_usage`` as the KV-cache fill follows the Gateway API Inference Extension's model-server
  protocol (``docs/proposals/003-model-server-protocol/README.md``).
- **Hugging Face TGI**: ``docs/source/reference/metrics.md`` (huggingface/text-generation-inference
  @53fdbe617d4f) and ``router/src/infer/v3/queue.rs``/``scheduler.rs``: ``tgi_queue_size``,
  ``tgi_batch_current_size``; no labels (one model per server). TGI has no time-to-first-token and no
  KV-cache series. ``tgi_request_mean_time_per_token_duration`` (per request: inference time over generated
  tokens, so prefill included) stands in for inter-token latency; ``tgi_request_input_length_sum`` and
  ``tgi_request_generated_tokens_sum`` (histogram sums, counted when a request finishes) for the token
  counters; the counter ``tgi_request_success`` (written without ``_total``: TGI's exporter adds none)
  for the finished requests (failed ones, ``tgi_request_failure``, mostly fail validation before the queue,
  and are not read).
- **NVIDIA Triton / TensorRT-LLM**: ``docs/user_guide/metrics.md`` (triton-inference-server/server
  @067c1e968356 and its newer version with ``nv_inference_pending_request_count``: "the pending request
  count and queue size per-model can be used interchangeably"), ``nv_inference_first_response_histogram_ms``
  (opt-in: ``--metrics-config histogram_latencies=true``; milliseconds, read as seconds), and the TensorRT-LLM
  backend's ``inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc``
  (triton-inference-server/tensorrtllm_backend @7f9aa4680aaf): ``nv_trt_llm_request_metrics{request_type}``
  (``scheduled`` read as running; newer backends add ``waiting``) and
  ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type}`` (``used`` over ``max``; else ``fraction``);
  labels ``model`` and ``version``. Finished requests: Triton's own counter ``nv_inference_request_success``
  ("Number of successful inference requests received by Triton (each request is counted as 1, even if the
  request contains a batch)", per model, counted when the request completes; summed over versions). Not
  covered: inter-token latency and token counters (Triton counts
  inferences, not tokens), and TensorRT-LLM's own ``trtllm-serve`` server.

Per model, series that differ in other labels are combined: the same signal from shards of one scheduler
(SGLang's ``tp_rank``/``pp_rank``/``moe_ep_rank``) by the maximum, separate schedulers (vLLM's ``engine``,
SGLang's ``dp_rank``, Triton's ``version``) by the sum (the KV-cache fill by the mean, as vLLM's
``AggregatedLoggingStatLogger`` does). A value that cannot be right (NaN, ±Inf, negative, a cache fill above
1, a histogram whose cumulative counts fall or that lacks ``+Inf``) makes that field absent for that model,
with a note; a series not exposed is absent. Nothing is ever made 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ...exposition import Exposition, Labels, Selection
from ...model import BucketCounts, EngineSample, ModelSignals, engine_signals

__all__ = [
    "ENGINES",
    "Counter",
    "EngineSpec",
    "Gauge",
    "Hist",
    "Ratio",
    "detect",
    "engines_in",
    "map_exposition",
]

_FIELDS = engine_signals()  # every signal of ModelSignals: each is a field of EngineSpec too


@dataclass(frozen=True, slots=True)
class Gauge:
    """A gauge's samples ``name`` whose labels include ``match``, times ``scale``."""

    name: str
    match: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0


@dataclass(frozen=True, slots=True)
class Ratio:
    """``used / total`` of two gauges, times ``scale`` (TensorRT-LLM's KV-cache blocks)."""

    used: Gauge
    total: Gauge
    scale: float = 100.0


@dataclass(frozen=True, slots=True)
class Hist:
    """A histogram family (its ``_bucket`` samples), bounds times ``scale`` (milliseconds → seconds)."""

    family: str
    scale: float = 1.0


@dataclass(frozen=True, slots=True)
class Counter:
    """A monotonic total, by its sample name as written (``vllm:prompt_tokens_total``), summed over its
    series whose labels include ``match``."""

    name: str
    match: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """Where one engine keeps each signal of ``model.ENGINE_SIGNALS``, a field each: alternatives in order
    (per model, the first exposed wins); a gauge from ``Gauge`` (or ``Ratio``), a counter from ``Counter``, a
    histogram from ``Hist``."""

    name: str
    markers: tuple[str, ...]
    model_label: str | None
    shard_labels: tuple[str, ...] = ()
    waiting: tuple[Gauge, ...] = ()
    running: tuple[Gauge, ...] = ()
    kv_cache_usage: tuple[Gauge | Ratio, ...] = ()
    ttft: tuple[Hist, ...] = ()
    itl: tuple[Hist, ...] = ()
    prompt_tokens: tuple[Counter, ...] = ()
    generation_tokens: tuple[Counter, ...] = ()
    requests_finished: tuple[Counter, ...] = ()
    requests_aborted: tuple[Counter, ...] = ()
    queue_time_sum: tuple[Counter, ...] = ()
    queue_time_count: tuple[Counter, ...] = ()
    optional: tuple[str, ...] = ()  # fields not every server of this engine exposes: no note when absent

    def families(self) -> set[str]:
        out: set[str] = set()
        for f in _FIELDS:
            for source in getattr(self, f):
                if isinstance(source, Gauge):
                    out.add(source.name)
                elif isinstance(source, Ratio):
                    out.update((source.used.name, source.total.name))
                elif isinstance(source, Hist):
                    out.add(source.family)
                else:
                    out.add(source.name)
        return out


VLLM = EngineSpec(
    name="vllm",
    markers=("vllm:",),
    model_label="model_name",
    waiting=(Gauge("vllm:num_requests_waiting"),),
    running=(Gauge("vllm:num_requests_running"),),
    kv_cache_usage=(
        Gauge("vllm:kv_cache_usage_perc", scale=100.0),
        Gauge("vllm:gpu_cache_usage_perc", scale=100.0),
    ),
    ttft=(Hist("vllm:time_to_first_token_seconds"),),
    itl=(Hist("vllm:inter_token_latency_seconds"), Hist("vllm:time_per_output_token_seconds")),
    prompt_tokens=(Counter("vllm:prompt_tokens_total"),),
    generation_tokens=(Counter("vllm:generation_tokens_total"),),
    requests_finished=(Counter("vllm:request_success_total"),),
    requests_aborted=(Counter("vllm:request_success_total", match=(("finished_reason", "abort"),)),),
    queue_time_sum=(Counter("vllm:request_queue_time_seconds_sum"),),
    queue_time_count=(Counter("vllm:request_queue_time_seconds_count"),),
    # a server that aborted nothing may not have that series yet; the queue time is newer than the rest
    optional=("requests_aborted", "queue_time_sum", "queue_time_count"),
)
SGLANG = EngineSpec(
    name="sglang",
    markers=("sglang:",),
    model_label="model_name",
    shard_labels=("tp_rank", "pp_rank", "moe_ep_rank"),
    waiting=(Gauge("sglang:num_queue_reqs"),),
    running=(Gauge("sglang:num_running_reqs"),),
    kv_cache_usage=(Gauge("sglang:token_usage", scale=100.0),),
    ttft=(Hist("sglang:time_to_first_token_seconds"),),
    itl=(Hist("sglang:inter_token_latency_seconds"), Hist("sglang:time_per_output_token_seconds")),
    prompt_tokens=(Counter("sglang:prompt_tokens_total"),),
    generation_tokens=(Counter("sglang:generation_tokens_total"),),
    requests_finished=(Counter("sglang:num_requests_total"),),
)
TGI = EngineSpec(
    name="tgi",
    markers=("tgi_",),
    model_label=None,
    waiting=(Gauge("tgi_queue_size"),),
    running=(Gauge("tgi_batch_current_size"),),
    itl=(Hist("tgi_request_mean_time_per_token_duration"),),
    prompt_tokens=(Counter("tgi_request_input_length_sum"),),
    generation_tokens=(Counter("tgi_request_generated_tokens_sum"),),
    requests_finished=(Counter("tgi_request_success"),),
)
TRITON = EngineSpec(
    name="triton",
    markers=("nv_inference_", "nv_trt_llm_"),
    model_label="model",
    waiting=(
        Gauge("nv_trt_llm_request_metrics", match=(("request_type", "waiting"),)),
        Gauge("nv_inference_pending_request_count"),
    ),
    running=(Gauge("nv_trt_llm_request_metrics", match=(("request_type", "scheduled"),)),),
    kv_cache_usage=(
        Ratio(
            Gauge("nv_trt_llm_kv_cache_block_metrics", match=(("kv_cache_block_type", "used"),)),
            Gauge("nv_trt_llm_kv_cache_block_metrics", match=(("kv_cache_block_type", "max"),)),
        ),
        Gauge("nv_trt_llm_kv_cache_block_metrics", match=(("kv_cache_block_type", "fraction"),), scale=100.0),
    ),
    ttft=(Hist("nv_inference_first_response_histogram_ms", scale=0.001),),
    requests_finished=(Counter("nv_inference_request_success"),),
    optional=("running", "kv_cache_usage", "ttft"),  # TensorRT-LLM backend only; the histogram is opt-in
)
ENGINES: tuple[EngineSpec, ...] = (VLLM, SGLANG, TGI, TRITON)
_SELECTIONS = {spec.name: Selection.of(spec.families()) for spec in ENGINES}


def engines_in(text: str) -> Iterator[EngineSpec]:
    """The engines whose names appear in ``text``, in ``ENGINES`` order, found lazily: each test scans the
    whole body when the name is absent (about 30 us for 67 kB), so a caller that stops at the first engine
    that maps scans for no other."""
    return (spec for spec in ENGINES if any(m in text for m in spec.markers))


def detect(text: str) -> list[EngineSpec]:
    """All the engines whose names appear in ``text``, in ``ENGINES`` order."""
    return list(engines_in(text))


def selection(spec: EngineSpec) -> Selection:
    return _SELECTIONS.get(spec.name) or Selection.of(spec.families())


def _series(name: str, labels: Labels) -> str:
    shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{shown}}}"


class _Mapper:
    """One exposition under one spec. ``notes`` collects why a field is absent."""

    def __init__(self, spec: EngineSpec, expo: Exposition) -> None:
        self.spec, self.expo = spec, expo
        self.notes: list[str] = []
        self.skip = {*spec.shard_labels, "le"}
        if spec.model_label is not None:
            self.skip.add(spec.model_label)

    def _model(self, labels: Labels) -> str:
        label = self.spec.model_label
        return labels.get(label, "") if label is not None else ""

    def _group(self, labels: Labels, skip: set[str]) -> tuple[tuple[str, str], ...]:
        rest = [(k, v) for k, v in labels.items() if k not in skip]
        if len(rest) > 1:
            rest.sort()
        return tuple(rest)

    def _gauge_groups(
        self, g: Gauge, kind: str
    ) -> dict[str, dict[tuple[tuple[str, str], ...], float | None]]:
        """model → (scheduler group → value, max over shards), ``None`` where a value cannot be right."""
        out: dict[str, dict[tuple[tuple[str, str], ...], float | None]] = {}
        skip = self.skip | {k for k, _ in g.match}
        for labels, value in self.expo.get(g.name, ()):
            if any(labels.get(k) != v for k, v in g.match):
                continue
            model = self._model(labels)
            groups = out.setdefault(model, {})
            key = self._group(labels, skip)
            bad = _bad_value(value, kind)
            if bad:
                self.notes.append(f"{_series(g.name, labels)} is {bad}")
                groups[key] = None
                continue
            if key in groups:
                old = groups[key]
                groups[key] = None if old is None else max(old, value)
            else:
                groups[key] = value
        return out

    def gauge(self, g: Gauge, kind: str, mean: bool = False) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for model, groups in self._gauge_groups(g, kind).items():
            values = list(groups.values())
            if any(v is None for v in values):
                out[model] = None
                continue
            total = math.fsum(v for v in values if v is not None)
            out[model] = (total / len(values) if mean else total) * g.scale
        return out

    def ratio(self, r: Ratio) -> dict[str, float | None]:
        used, total = self.gauge(r.used, "gauge"), self.gauge(r.total, "gauge")
        out: dict[str, float | None] = {}
        for model, u in used.items():
            t = total.get(model)
            if u is None or t is None or t <= 0 or u > t:
                if u is not None and t is not None:
                    self.notes.append(
                        f"{r.used.name}: {u:g} used of {t:g} for model {model!r} cannot be right"
                    )
                out[model] = None
            else:
                out[model] = u / t * r.scale
        return out

    def kv(self, source: Gauge | Ratio) -> dict[str, float | None]:
        if isinstance(source, Ratio):
            return self.ratio(source)
        values = self.gauge(source, "ratio", mean=True)
        return values

    def counter(self, c: Counter) -> dict[str, float | None]:
        return self.gauge(Gauge(c.name, c.match), "counter")

    def hist(self, h: Hist) -> dict[str, BucketCounts | None]:
        name = h.family + "_bucket"
        per: dict[str, dict[tuple[tuple[str, str], ...], dict[float, float]]] = {}
        broken: set[str] = set()
        model_label, skip, scale = self.spec.model_label, self.skip, h.scale
        for labels, value in self.expo.get(name, ()):
            model = labels.get(model_label, "") if model_label is not None else ""
            bound = _bound(labels.get("le"))
            if bound != bound or value != value or value < 0 or value == math.inf:  # NaN, or cannot be right
                if model not in broken:
                    self.notes.append(f"{_series(name, labels)} cannot be right (le or count)")
                broken.add(model)
                continue
            groups = per.get(model)
            if groups is None:
                groups = per[model] = {}
            key = self._group(labels, skip)
            buckets = groups.get(key)
            if buckets is None:
                buckets = groups[key] = {}
            buckets[bound * scale] = value
        out: dict[str, BucketCounts | None] = {}
        for model, groups in per.items():
            out[model] = None if model in broken else self._combine(h.family, model, list(groups.values()))
        for model in broken - out.keys():
            out[model] = None
        return out

    def _combine(self, family: str, model: str, groups: Sequence[dict[float, float]]) -> BucketCounts | None:
        bounds = sorted(groups[0])
        if not bounds or bounds[-1] != math.inf:
            self.notes.append(f"{family} of model {model!r} has no +Inf bucket")
            return None
        if any(sorted(g) != bounds for g in groups[1:]):
            self.notes.append(f"{family} of model {model!r}: its series have different buckets")
            return None
        if len(groups) == 1:
            counts = [groups[0][b] for b in bounds]
        else:
            counts = [math.fsum(g[b] for g in groups) for b in bounds]
        if any(later < earlier for earlier, later in itertools.pairwise(counts)):
            self.notes.append(f"{family} of model {model!r}: cumulative bucket counts fall")
            return None
        return BucketCounts(tuple(bounds), tuple(counts))

    def first(self, field: str) -> dict[str, object]:
        """Per model, the value of the first source of ``field`` that exposes that model."""
        out: dict[str, object] = {}
        for source in getattr(self.spec, field):
            if isinstance(source, Hist):
                found: dict[str, object] = dict(self.hist(source))
            elif isinstance(source, Counter):
                found = dict(self.counter(source))
            elif field == "kv_cache_usage":
                found = dict(self.kv(source))
            else:
                found = dict(self.gauge(source, "gauge"))
            for model, value in found.items():
                out.setdefault(model, value)
        return out


_BOUNDS: dict[str, float] = {}  # le text -> bound: the same few dozen strings every scrape


def _bound(le: str | None) -> float:
    """A bucket's ``le`` as a number; NaN when it is not one."""
    if le is None:
        return math.nan
    bound = _BOUNDS.get(le)
    if bound is None:
        try:
            bound = float(le)
        except ValueError:
            bound = math.nan
        if len(_BOUNDS) < 4096:  # bounded: an engine cannot grow it without limit
            _BOUNDS[le] = bound
    return bound


def _bad_value(value: float, kind: str) -> str:
    """Why a value cannot be right (``""``: it can)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "infinite"
    if value < 0:
        return f"negative ({value:g})"
    if kind == "ratio" and value > 1.0 + 1e-9:
        return f"{value:g}, above 1 (it is a fraction 0-1)"
    return ""


def map_exposition(spec: EngineSpec, expo: Exposition, timestamp: float) -> EngineSample | None:
    """What ``expo`` says under ``spec``, per model; ``None`` when it has none of that engine's series."""
    mapper = _Mapper(spec, expo)
    fields = {f: mapper.first(f) for f in _FIELDS}
    models = sorted({m for values in fields.values() for m in values})
    if not models:
        return None
    for f in _FIELDS:
        if getattr(spec, f) and not fields[f] and f not in spec.optional:
            names = ", ".join(sorted({_source_name(s) for s in getattr(spec, f)}))
            mapper.notes.append(f"{f}: not exposed ({names})")
    signals = tuple(
        ModelSignals(model, **{f: fields[f].get(model) for f in _FIELDS})  # type: ignore[arg-type]
        for model in models
    )
    return EngineSample(timestamp, spec.name, signals, tuple(dict.fromkeys(mapper.notes)))


def _source_name(source: Gauge | Ratio | Hist | Counter) -> str:
    if isinstance(source, Ratio):
        return source.used.name
    if isinstance(source, Hist):
        return source.family
    return source.name
