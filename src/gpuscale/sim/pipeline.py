"""The metric pipeline: which instants of the true state a scaler sees, and what it computes from them.

Pure. A pipeline maps a query time to the *sample instants* behind the answer:

- ``GpuscalePipeline``: the agent samples every ``sampling_interval`` seconds and streams each sample to the
  scaler, where it arrives ``delay_seconds`` late; what the scaler makes of the samples it holds (window,
  staleness, aggregation) is ``gpuscale.scaling``'s, run by ``engine``.
- ``PrometheusPipeline``: the exporter collects every ``exporter_interval`` seconds, Prometheus scrapes
  every ``scrape_interval`` seconds (each at its offset) and keeps what the exporter last collected; the
  query sees the last scrape ``delay_seconds`` late (rule evaluation, network), or with ``range_seconds``
  the ``avg_over_time`` of the scrapes in that range.

A *signal* is what the query or the scaler computes: ``demand`` (a request rate counted in front of the
engines, so it exists at zero replicas), one value per pod of a *field* (``FIELD``, for an HPA ``Pods``
metric), or ``AGG(FIELD)`` with AGG one of ``SIGNAL_AGGREGATIONS``. The fields (``SIGNAL_FIELDS``):

- ``gpu_utilization``, ``gpu_memory`` (percent of the GPU's memory in use): dcgm-exporter's, from every
  Running pod (a loading pod reports 0 % utilization and its memory filling);
- ``queue`` (``vllm:num_requests_waiting``), ``running`` (``vllm:num_requests_running``), ``in_flight``
  (waiting + running), ``kv_cache`` (``vllm:kv_cache_usage_perc`` x 100), ``ttft`` (seconds): the engine's,
  from Ready pods only (a loading engine serves no metrics). ``sum(queue)`` is the query
  ``sum(vllm:num_requests_waiting)``: empty, so 0 under ``ignoreNullValues``, with no Ready pod.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from ..scaling.aggregate import aggregate
from ..scaling.profiles import Aggregation
from .workload import Observation

__all__ = [
    "PER_POD_SYNTAX",
    "SCALAR_SYNTAX",
    "SIGNAL_AGGREGATIONS",
    "SIGNAL_FIELDS",
    "SIGNAL_SYNTAX",
    "Field",
    "GpuscalePipeline",
    "PrometheusPipeline",
    "Signal",
    "evaluate_scalar",
    "parse_signal",
    "per_pod_values",
    "query_aggregate",
]

SIGNAL_AGGREGATIONS = ("avg", "count", "max", "min", "p50", "p90", "p95", "p99", "sum")
SIGNAL_FIELDS = ("gpu_utilization", "gpu_memory", "queue", "running", "in_flight", "kv_cache", "ttft")
Field = Literal["gpu_utilization", "gpu_memory", "queue", "running", "in_flight", "kv_cache", "ttft"]
_FIELDS_TEXT = f"FIELD in {', '.join(SIGNAL_FIELDS)}"
SIGNAL_SYNTAX = (
    f"demand, FIELD or AGG(FIELD), with {_FIELDS_TEXT} and AGG in {', '.join(SIGNAL_AGGREGATIONS)}"
)
PER_POD_SYNTAX = f"FIELD (one value per pod), {_FIELDS_TEXT}"
SCALAR_SYNTAX = f"demand or AGG(FIELD), {_FIELDS_TEXT} and AGG in {', '.join(SIGNAL_AGGREGATIONS)}"
_AGG = re.compile(
    r"^\s*(" + "|".join(SIGNAL_AGGREGATIONS) + r")\s*\(\s*(" + "|".join(SIGNAL_FIELDS) + r")\s*\)\s*$"
)
_ENGINE_FIELDS = frozenset(("queue", "running", "in_flight", "kv_cache", "ttft"))


@dataclass(frozen=True)
class Signal:
    kind: Literal["demand", "per_pod", "aggregate"]
    aggregation: str = ""
    field: Field = "gpu_utilization"

    def __str__(self) -> str:
        if self.kind == "demand":
            return "demand"
        if self.kind == "per_pod":
            return self.field
        return f"{self.aggregation}({self.field})"


def parse_signal(text: str) -> Signal | None:
    stripped = text.strip()
    if stripped == "demand":
        return Signal("demand")
    if stripped in SIGNAL_FIELDS:
        return Signal("per_pod", field=cast(Field, stripped))
    match = _AGG.match(stripped)
    return Signal("aggregate", match.group(1), cast(Field, match.group(2))) if match else None


@dataclass(frozen=True)
class GpuscalePipeline:
    sampling_interval: int = 1
    delay_seconds: int = 0
    # the agents also read the engines for a GPU trigger (the pods announce their /metrics): then a
    # GPU-utilization answer is uncapped by the engines' demand; engine triggers always read them
    read_engines: bool = False
    # the scaler reads a trigger's request path (``requestPath``) every second; its readings reach the
    # answer this many seconds after the second they count
    request_path_delay: int = 1


@dataclass(frozen=True)
class PrometheusPipeline:
    exporter_interval: int = 30
    scrape_interval: int = 30
    delay_seconds: int = 0
    range_seconds: int = 0
    exporter_offset: int = 0
    scrape_offset: int = 0

    def _collected(self, scrape_at: int) -> int:
        """The exporter's last collection at or before a scrape (collections at offset + k * interval)."""
        k = (scrape_at - self.exporter_offset) // self.exporter_interval
        return self.exporter_offset + k * self.exporter_interval

    def sample_times(self, t: int) -> tuple[int, ...]:
        query_at = t - self.delay_seconds
        k = (query_at - self.scrape_offset) // self.scrape_interval
        last_scrape = self.scrape_offset + k * self.scrape_interval
        if last_scrape < 0:
            return ()
        if self.range_seconds <= 0:
            collected = self._collected(last_scrape)
            return (collected,) if collected >= 0 else ()
        scrapes = range(last_scrape, max(-1, query_at - self.range_seconds), -self.scrape_interval)
        return tuple(c for c in (self._collected(s) for s in reversed(scrapes)) if c >= 0)


def per_pod_values(observations: Sequence[Observation], field: Field = "gpu_utilization") -> dict[str, float]:
    """Each pod's mean of ``field`` over the observations in which it reported it: GPU fields from every
    Running pod (loading: 0 % utilization, its memory filling), engine fields from Ready pods only."""
    if field == "gpu_utilization":
        return _utilization_per_pod(observations)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for o in observations:
        if field == "gpu_memory":
            values = o.memory()
        elif field in _ENGINE_FIELDS:
            values = dict.fromkeys(o.ready, _engine_value(o, field)) if o.ready else {}
        else:
            raise ValueError(field)
        for name, v in values.items():
            sums[name] = sums.get(name, 0.0) + v
            counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sums}


def _engine_value(o: Observation, field: Field) -> float:
    """One Ready pod's engine metric (each holds an equal share of the workload's requests)."""
    n = len(o.ready)
    if field == "queue":
        return o.waiting / n
    if field == "running":
        return o.running / n
    if field == "in_flight":
        return (o.waiting + o.running) / n
    if field == "kv_cache":
        return o.kv_cache
    return o.ttft


def _utilization_per_pod(observations: Sequence[Observation]) -> dict[str, float]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    i, n = 0, len(observations)
    while i < n:  # runs of observations with the same pods are summed in one pass
        first = observations[i]
        j, util_sum = i, 0.0
        while j < n and observations[j].ready == first.ready and observations[j].loading == first.loading:
            util_sum += observations[j].util
            j += 1
        for name in first.loading:
            sums[name] = sums.get(name, 0.0)
            counts[name] = counts.get(name, 0) + (j - i)
        for name in first.ready:
            sums[name] = sums.get(name, 0.0) + util_sum
            counts[name] = counts.get(name, 0) + (j - i)
        i = j
    return {name: sums[name] / counts[name] for name in sums}


def query_aggregate(values: Sequence[float], aggregation: str) -> float | None:
    """What a PromQL aggregation over the per-pod series gives; None when there is nothing to aggregate (an
    empty query result). ``count`` is PromQL's; the others are the scaler's own (``gpuscale.scaling``)."""
    if not values:
        return None
    if aggregation == "count":
        return float(len(values))
    return aggregate(values, cast(Aggregation, aggregation))


def evaluate_scalar(signal: Signal, observations: Sequence[Observation]) -> float | None:
    """A scalar signal over the sampled observations; None when the result is empty."""
    if not observations:
        return None
    if signal.kind == "demand":
        return sum(o.demand for o in observations) / len(observations)
    values = per_pod_values(observations, signal.field)
    return query_aggregate(list(values.values()), signal.aggregation or "avg")
