"""The decisions ``answer`` makes beyond the measured value, each a named step over one ``WorkloadView``.

Each step takes the answer so far and returns it, or a changed one that says which ``Decision`` changed it
(``Evaluation.decision``, with a ``detail`` for people: ``ahead 120 s``). ``answer`` runs them in a fixed
order (docs/architecture.md draws it):

* ``all_loading``: every GPU pod still starting: hold the count, active;
* ``uncap``: GPU utilization times what the engines are asked over what they serve;
* ``ahead``: the forecast one cold start ahead (``scaleAhead``);
* ``backlog_hold``: a served rate never scales down while requests wait;
* ``kv_floor``: the replicas that keep the KV-cache fill under ``kvCacheGuard``;
* ``n_minus_1_guard``: no scale-down below what the present readings need;
* ``capacity_floor``: ``request_rate`` at the learned capacity while the queue grows;
* ``request_path``: the demand in front of the workload, at zero and while every pod loads;
* ``missing_with_path``: too many pods missing, yet the request path counts the demand.

Every per-pod engine value a call needs is computed once (``signals.Signals``), whichever steps ask for it;
what the steps read (the demand ratio, the forecast, the backlog) is ``signals``.

Pure: time is an argument.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import replace

from .aggregate import Evaluation, GpuSeries, evaluate
from .engine import EngineSeries, gauge
from .errors import MissingPods, NoDataError, RequestPathMissing
from .keys import ENGINE_METRICS
from .metadata import TriggerMetadata, derived
from .requestpath import RequestPath, demand
from .signals import (
    Signals,
    backlog,
    demand_ratio,
    engine_total,
    forecast_ahead,
    queue_grows,
    replica_rate,
)
from .view import WorkloadView

__all__ = [
    "HPA_TOLERANCE",
    "SERVED_RATES",
    "Decision",
    "ahead",
    "all_loading",
    "backlog_hold",
    "capacity_floor",
    "ceil_ratio",
    "decide",
    "decide_missing",
    "engine_steps",
    "gpu_steps",
    "kv_floor",
    "missing_with_path",
    "n_minus_1_guard",
    "replica_count",
    "request_path",
    "uncap",
]

# kube-controller-manager's --horizontal-pod-autoscaler-tolerance default: the band in which the HPA keeps
# the current replica count.
HPA_TOLERANCE = 0.1
# Rates counted as requests (or tokens) leave the engine: capped at what the Ready pods serve. While
# requests wait, the demand is more than that by an amount they cannot say (released vLLM counts no request a
# client abandons in the queue: vllm-project/vllm#31503), so a scale-down is held.
SERVED_RATES: frozenset[str] = frozenset({"request_rate", "generation_tokens_per_second"})


class Decision(enum.Enum):
    """Which step changed an answer. The value is the words people read (``Evaluation.decided`` adds the
    step's figures); the lower-cased name is the ``decision`` label of the scaler's metrics."""

    ALL_PODS_LOADING = "all pods loading"
    UNCAPPED = "uncapped by the engines' demand"
    AHEAD = "ahead"
    BACKLOG_HOLD = "backlog hold"
    KV_CACHE_GUARD = "KV-cache guard"
    N_MINUS_1_GUARD = "N-1 guard"
    CAPACITY = "capacity"
    REQUEST_PATH = "request path"

    @property
    def label(self) -> str:
        """The metrics' ``decision`` label: ``n_minus_1_guard``."""
        return self.name.lower()


def ceil_ratio(value: float, target: float) -> int:
    """The HPA's ``ceil(value / target)`` (with a hair of slack for floating point)."""
    return math.ceil(value / target - 1e-9)


def _changed(result: Evaluation, value: float, decision: Decision, detail: str = "") -> Evaluation:
    return replace(result, value=value, decision=decision, detail=detail)


# -- every pod starting ---------------------------------------------------------------------------------


def all_loading(md: TriggerMetadata, loading: int, replicas: int | None) -> Evaluation:
    """Every GPU pod is still starting: nothing is measured yet, and nothing is idle. The answer keeps the
    count (``target x replicas``: the HPA's ratio is 1) and is active, so a workload waking from zero or
    replacing its pods is never scaled down, or to zero, by pods that have not loaded their model yet."""
    count = max(loading, replicas or 0)
    return Evaluation(
        value=md.target_value * count,
        aggregate=md.target_value,
        active=True,
        gpus=0,
        pods=0,
        skipped=0,
        newest_sample_age=math.inf,
        loading=loading,
        decision=Decision.ALL_PODS_LOADING,
    )


# -- GPU utilization: what is asked, not what is served ----------------------------------------------------


def uncap(
    md: TriggerMetadata, result: Evaluation, engines: Sequence[EngineSeries], signals: Signals
) -> Evaluation:
    """GPU utilization saturates at 100 %: it says what is served, not what is asked. Where the engines of
    every pod the answer counts say both (``demand_ratio``), the answer is the utilization the demand would
    take, ``value x arriving / served``, when that is more than the HPA's tolerance above it. It only ever
    raises the answer: a draining queue (fewer arriving than served) leaves the utilization as it is."""
    if not engines or not result.fresh_pods:
        return result
    ratio = demand_ratio(md, engines, result.fresh_pods, signals)
    if ratio is None or ratio <= 1.0 + HPA_TOLERANCE:
        return result
    return _changed(result, result.value * ratio, Decision.UNCAPPED, f"(x{ratio:.2f})")


# -- engine metrics: ahead, backlog, KV cache --------------------------------------------------------------


def ahead(
    md: TriggerMetadata,
    result: Evaluation,
    engines: Sequence[EngineSeries],
    loading: frozenset[str],
    cold_start: float | None,
    now: float,
) -> Evaluation:
    """``scaleAhead: auto``: the forecast of the workload's value one learned cold start ahead, over the
    readings of its Ready pods and of those deleted within the look-back, where it rises above the answer
    (a forecast is never below the present)."""
    if md.scale_ahead != "auto" or cold_start is None or cold_start <= 0:
        return result
    past = [e for e in engines if e.departed or (e.pod not in loading and e.samples)]
    f = forecast_ahead(md, past, now, cold_start, result.value)
    if f.trend and f.value > result.value:
        return _changed(result, f.value, Decision.AHEAD, f"{cold_start:.0f} s")
    return result


def backlog_hold(
    md: TriggerMetadata, result: Evaluation, ready: Sequence[EngineSeries], signals: Signals, count: int
) -> Evaluation | None:
    """A served rate (``SERVED_RATES``) never scales down while requests wait on the Ready pods: the
    answer holds ``count``. ``None`` where it does not apply."""
    if md.metric not in SERVED_RATES or backlog(md, ready, signals) < 1.0:
        return None
    return _changed(result, md.target_value * count, Decision.BACKLOG_HOLD)


def kv_floor(
    md: TriggerMetadata, result: Evaluation, ready: Sequence[EngineSeries], count: int, missing: int
) -> Evaluation | None:
    """``kvCacheGuard``'s floor: the replicas that keep the Ready pods' mean KV-cache fill at or below the
    guard (``ceil(pods x mean fill / guard)``, plus ``missing`` pods each counted as needed), at most
    ``count``; the answer raised to it, or ``None`` where it does not raise it."""
    guard = md.kv_cache_guard
    if guard is None or ceil_ratio(result.value, md.target_value) >= count:
        return None
    kv = [gauge(e.samples[-1], "kv_cache_usage", md.model) for e in ready if e.samples]
    known = [v for v in kv if v is not None]
    if not known:
        return None
    floor = min(count, math.ceil(math.fsum(known) / guard - 1e-9) + missing)
    if floor <= ceil_ratio(result.value, md.target_value):
        return None
    return _changed(result, md.target_value * floor, Decision.KV_CACHE_GUARD)


def n_minus_1_guard(md: TriggerMetadata, result: Evaluation, present: float, count: int) -> Evaluation:
    """Scale-down that holds: an answer that would take the workload below ``count`` replicas never goes
    below what the present value needs (``ceil(present / target)``, at most ``count``): so it never takes
    the workload to N-1 replicas when N-1 at the target would not carry the present demand (the smoothed
    value lags a rise; a forecast is never below the present). ``kvCacheGuard``'s floor is ``kv_floor``."""
    target = md.target_value
    if count <= 0 or ceil_ratio(result.value, target) >= count:
        return replace(result, present=present)
    floor = min(present, target * count)
    if floor > result.value and ceil_ratio(floor, target) > ceil_ratio(result.value, target):
        return replace(result, value=floor, decision=Decision.N_MINUS_1_GUARD, detail="", present=present)
    return replace(result, present=present)


# -- the learned capacity ----------------------------------------------------------------------------------


def capacity_floor(
    md: TriggerMetadata, result: Evaluation, engines: Sequence[EngineSeries], now: float, capacity: float
) -> Evaluation:
    """``request_rate`` with a learned ``capacity`` below what the target assumes: while the Ready pods'
    queue grows, the answer is never below the replicas the present demand needs at that capacity,
    ``ceil(demand / capacity)``, so a trigger whose target a replica cannot serve does not stop short."""
    if result.pods == 0 or result.missing or capacity <= 0 or not queue_grows(md, engines, result, now):
        return result
    need = math.ceil(result.value / capacity - 1e-9)
    if need <= ceil_ratio(result.value, md.target_value):
        return result
    return _changed(result, md.target_value * need, Decision.CAPACITY, f"{capacity:.2f} req/s")


# -- the request path ------------------------------------------------------------------------------------


def request_path(
    md: TriggerMetadata,
    result: Evaluation,
    path: RequestPath,
    now: float,
    replicas: int | None,
    capacity: float | None,
    workload: str,
) -> Evaluation:
    """The request path's demand on top of the answer. Where no pod is Ready (zero replicas, or every pod
    starting) it is the demand: ``ceil(demand / rate)`` replicas (``replica_rate``), never fewer than the
    pods already coming; so the first sync after a wake asks for the demand's replicas, 0 -> N, not 0 -> 1.
    Where pods are Ready, the answer is at least what it counts: a floor, it never lowers the engines', and
    active while anything arrives (a workload still asked for is not idle, however empty its queue).
    A source with no honest reading changes nothing where pods speak, and where none does the answer is
    ``RequestPathMissing``: never a made-up 0."""
    pd = demand(path, now, md.request_path_drain_seconds)
    blind = result.pods == 0 and result.missing == 0  # no pod of the workload can say anything
    if pd is None:
        if blind and result.loading == 0:
            raise RequestPathMissing(workload, path.source, path.missing or "no reading yet")
        return result
    rate = replica_rate(md, capacity)
    target = md.target_value
    where = f"{pd.demand:.1f} req/s"
    if blind:
        count = max(result.loading, replicas or 0)  # Pending pods too: coming, never scaled away
        need = (1 if pd.demand > 0 else 0) if rate is None else math.ceil(pd.demand / rate - 1e-9)
        if need <= count:
            if result.loading or count == 0:
                return result  # every pod loading: the answer already holds them; none at all: 0
            # Pending pods only (not on a GPU node yet): held, not scaled away
            held = _changed(result, target * count, Decision.REQUEST_PATH, where)
            return replace(held, aggregate=target, active=True)
        asked = _changed(result, target * need, Decision.REQUEST_PATH, where)
        return replace(asked, aggregate=target, active=True)
    if pd.demand > 0 and not result.active:
        result = replace(result, active=True)  # requests still arrive: not idle, whatever the engines say
    if rate is None:
        return result
    floor = target * pd.demand / rate
    if ceil_ratio(floor, target) <= ceil_ratio(result.value, target):
        return result
    return replace(_changed(result, floor, Decision.REQUEST_PATH, where), active=True)


def missing_with_path(
    md: TriggerMetadata,
    e: MissingPods,
    path: RequestPath,
    now: float,
    replicas: int | None,
    capacity: float | None,
) -> Evaluation | None:
    """Too many of the workload's pods are missing (their engines or GPUs unread), yet the request path in
    front of them counts the demand: the answer is the larger of the replicas it needs and those the workload
    has, so missing data never scales it down and the demand still scales it up. ``None`` where the request
    path says nothing honest either (then ``MissingPods`` stands)."""
    pd = demand(path, now, md.request_path_drain_seconds)
    if pd is None:
        return None
    count = max(replicas or 0, e.missing + e.fresh)  # replicas: the GPU pods counted, loading ones too
    rate = replica_rate(md, capacity)
    need = math.ceil(pd.demand / rate - 1e-9) if rate is not None else 0
    return Evaluation(
        value=md.target_value * max(need, count),
        aggregate=md.target_value,
        active=True,
        gpus=0,
        pods=e.fresh,
        skipped=e.missing,
        newest_sample_age=math.inf,
        missing=e.missing,
        missing_where=e.nodes,
        decision=Decision.REQUEST_PATH,
        detail=f"{pd.demand:.1f} req/s (pods missing)",
    )


# -- the order ---------------------------------------------------------------------------------------------


def replica_count(result: Evaluation, replicas: int | None) -> int:
    """The workload's replicas as the HPA counts them: ``status.replicas`` where known, else its GPU pods."""
    return max(replicas or 0, result.pods + result.missing + result.loading)


def decide(
    md: TriggerMetadata, result: Evaluation, view: WorkloadView, now: float, signals: Signals
) -> Evaluation:
    """The decisions on top of the measured ``result``, in order: the metric's own (``engine_steps`` or
    ``gpu_steps``), then the learned capacity's floor and the request path's demand."""
    if md.metric in ENGINE_METRICS:
        result = engine_steps(md, result, view, now, signals)
    elif md.scope == "workload":
        result = gpu_steps(md, result, view, now, signals)
    if view.capacity is not None and md.metric == "request_rate":
        result = capacity_floor(md, result, view.engines, now, view.capacity)
    if view.request_path is not None and md.request_path is not None and md.scope == "workload":
        result = request_path(md, result, view.request_path, now, view.replicas, view.capacity, view.name)
    return result


def decide_missing(md: TriggerMetadata, e: MissingPods, view: WorkloadView, now: float) -> Evaluation | None:
    """Too many pods missing: the request path's answer (``missing_with_path``), or ``None`` (the error
    stands)."""
    if view.request_path is None or md.request_path is None or md.scope != "workload":
        return None
    replicas = max(view.replicas or 0, len(view.pods))
    return missing_with_path(md, e, view.request_path, now, replicas, view.capacity)


def gpu_steps(
    md: TriggerMetadata, result: Evaluation, view: WorkloadView, now: float, signals: Signals
) -> Evaluation:
    """A GPU metric in workload scope: ``uncap`` (GPU utilization), then, where the answer is a scale-down,
    the N-1 guard over the Ready pods' newest samples. An answer the missing-pod rule made, or one with
    no pod measured, is left as it is."""
    if result.missing or result.pods == 0:
        return result
    if md.metric == "gpu_utilization" and md.engine_demand != "off":
        result = uncap(md, result, view.engines, signals)
    count = replica_count(result, view.replicas)
    if ceil_ratio(result.value, md.target_value) >= count:
        return result  # not a scale-down: the guard has nothing to hold (and the newest value is not needed)
    loading = view.loading()
    series: Sequence[GpuSeries] = [s for s in view.series if s.pod not in loading]
    try:
        present = evaluate(derived(md, window=0.0), series, now=now).value
    except NoDataError:
        return result
    return n_minus_1_guard(md, result, present, count)


def engine_steps(
    md: TriggerMetadata, result: Evaluation, view: WorkloadView, now: float, signals: Signals
) -> Evaluation:
    """An engine metric, in order: the forecast one cold start ahead, then, where that is a scale-down, the
    backlog hold, the KV-cache floor, the N-1 guard. An answer with nothing measured is left as it is; one
    the missing-pod rule made gets the KV-cache floor alone, each missing pod counted as one replica needed
    (as the HPA's rule counts a missing pod at the target when scaling down), so missing pods never lower
    what the floor holds."""
    if result.pods == 0:
        return result
    loading = view.loading()
    fresh = result.fresh_pods
    ready = [e for e in view.engines if e.pod in fresh and e.pod not in loading and not e.departed]
    count = replica_count(result, view.replicas)
    if result.missing:
        floored = kv_floor(md, result, ready, count, result.missing)
        return floored if floored is not None else result
    decided = ahead(md, result, view.engines, loading, view.cold_start, now)
    if ceil_ratio(decided.value, md.target_value) >= count:
        return decided  # not a scale-down: the floor and the guard have nothing to hold
    held = backlog_hold(md, decided, ready, signals, count)
    if held is not None:
        return held
    present = engine_total(derived(md, window=0.0), ready, signals, now)
    floored = kv_floor(md, decided, ready, count, 0)
    if floored is not None:
        return replace(floored, present=present)
    return n_minus_1_guard(md, decided, present, count)
