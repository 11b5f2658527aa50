"""What KEDA gets for one trigger: ``answer`` turns the GPU series a trigger's scope holds into the value
(``GetMetrics``) and the activity (``IsActive``), or the error that says why there is none.

The rules of a workload as a whole live here, once, for the scaler and the simulator alike:

* a workload with no GPU pod on a GPU node (scaled to zero, or every pod Pending) reports **0 and
  inactive**: there is nothing to measure, and KEDA's activation from zero needs another trigger;
* a **missing pod** is a GPU pod of the workload (one that asks for a GPU, running on a GPU node) without a
  fresh, attributed sample: its agent is gone, hung or restarting, its node was forgotten, the kubelet lists
  no device for it, or its share of a shared GPU is unknown. Missing pods are treated as the HPA treats pods
  without metrics (``replica_calculator.go``): when the fresh pods ask to scale up, missing pods count as 0;
  when they ask to scale down, as exactly the target; the ratio is computed again, and if that flips the
  direction or falls within the HPA's tolerance (``HPA_TOLERANCE``, kube-controller-manager's default 0.1),
  the answer keeps the current count (``target x pods``). So broken monitoring never scales a workload
  down, and a workload with missing pods is never inactive;
* ``MissingPods`` (``UNAVAILABLE``: KEDA keeps the replicas or applies its fallback) when no GPU pod is fresh,
  or when more than ``maxMissingPercent`` of them are missing; ``UnattributedPods`` when GPU pods run but none
  has an attributed GPU;
* otherwise ``aggregate.evaluate``: smoothing per GPU, aggregation, and ``aggregate * pods`` in workload
  scope (``NoDataError`` when no GPU has a fresh sample).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .aggregate import Evaluation, GpuSeries, aggregate, evaluate
from .engine import EngineSeries, gauge, in_window, pod_value, pod_value_at, served_rate
from .errors import MissingPods, NoDataError, RequestPathMissing, UnattributedPods
from .forecast import Forecast, forecast
from .keys import ADDITIVE_METRICS, ENGINE_METRICS
from .metadata import TriggerMetadata, derived
from .requestpath import RequestPath, demand

__all__ = [
    "HPA_TOLERANCE",
    "NO_PODS",
    "GpuPod",
    "Missing",
    "answer",
    "demand_ratio",
    "missing_pods",
    "replica_rate",
]

NO_PODS = Evaluation(
    value=0.0, aggregate=0.0, active=False, gpus=0, pods=0, skipped=0, newest_sample_age=math.inf
)
# kube-controller-manager's --horizontal-pod-autoscaler-tolerance default: the band in which the HPA keeps
# the current replica count.
HPA_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A pod of the workload that asks for a GPU, as the scaler knows it: ``name`` is ``namespace/name``;
    ``connected``: its node's agent is streaming (False: gone or restarting; ``forgotten``: the node was
    dropped after ``--forget-after``, its pods kept as missing); ``ready``: its Ready condition (from its
    agent's report or the API's list), ``False`` while it starts (scheduled, pulling, loading its model),
    ``None`` when not known (then it counts as Ready did before readiness was reported)."""

    name: str
    node: str
    connected: bool = True
    forgotten: bool = False
    reported: bool = True  # False: the Kubernetes API lists it Running, no agent has reported it
    ready: bool | None = None


@dataclass(frozen=True, slots=True)
class Missing:
    """A missing pod and why: ``agent gone``, ``node forgotten``, ``no fresh sample``, ``no device listed``,
    ``share unknown`` or ``metric not reported``."""

    pod: str
    node: str
    reason: str


def missing_pods(
    md: TriggerMetadata,
    series: Sequence[GpuSeries],
    gpu_pods: Sequence[GpuPod],
    fresh: frozenset[str],
    *,
    now: float,
) -> list[Missing]:
    """The GPU pods of ``gpu_pods`` not in ``fresh``, each with its reason."""
    has_gpu: dict[str, bool] = {}  # pod -> any sample within staleAfter
    for s in series:
        if s.pod is not None:
            recent = any(now - x.timestamp <= md.stale_after for x in s.samples[-1:])
            has_gpu[s.pod] = has_gpu.get(s.pod, False) or recent
    out: list[Missing] = []
    for p in gpu_pods:
        if p.name in fresh:
            continue
        node_reason = _reason(p)
        if node_reason is not None:
            reason = node_reason
        elif p.name not in has_gpu:
            reason = "no device listed"
        elif not has_gpu[p.name]:
            reason = "no fresh sample"
        else:
            reason = "share unknown" if md.share == "container" else "metric not reported"
        out.append(Missing(p.name, p.node, reason))
    return out


def answer(
    md: TriggerMetadata,
    series: Sequence[GpuSeries],
    *,
    now: float,
    gpu_pods: Sequence[GpuPod] = (),
    workload: str = "the workload",
    engines: Sequence[EngineSeries] = (),
    replicas: int | None = None,
    cold_start: float | None = None,
    request_path: RequestPath | None = None,
    capacity: float | None = None,
) -> Evaluation:
    """The answer for ``md`` over ``series`` at ``now`` (Unix seconds). ``gpu_pods``: in workload scope, the
    workload's pods that ask for a GPU, wherever the scaler knows them from (connected, stale or forgotten
    nodes); ``workload`` names it in errors; ``replicas``: the target's pod count as its ``status.replicas``
    has it (Pending pods too), when known: the count the HPA divides by, so a held answer holds that many;
    ``cold_start``: the workload's learned cold start (``coldstart.ColdStarts``), seconds, when known;
    ``request_path``: what the scaler holds of the trigger's ``requestPath`` (``None``: none configured or
    not read by this caller); ``capacity``: requests/s one replica serves, as learned
    (``capacity.Capacities``), when known. Raise ``UnattributedPods``, ``MissingPods``, ``NoDataError`` or
    ``RequestPathMissing`` where there is no honest value."""
    shared = md if md.target_share else None
    if shared is not None:
        md = _as_rate(shared, capacity)
    try:
        result = _answer(
            md,
            series,
            now=now,
            gpu_pods=gpu_pods,
            workload=workload,
            engines=engines,
            replicas=replicas,
            cold_start=cold_start,
        )
    except MissingPods as e:
        if request_path is None or md.request_path is None or md.scope != "workload":
            raise
        held = _missing_with_path(md, e, request_path, now, max(replicas or 0, len(gpu_pods)), capacity)
        if held is None:
            raise
        return _in_share(held, shared, md)
    if capacity is not None and md.metric == "request_rate":
        result = _capacity_floor(md, result, engines, now, capacity)
    if request_path is not None and md.request_path is not None and md.scope == "workload":
        result = _through_request_path(md, result, request_path, now, replicas, capacity, workload)
    return _in_share(result, shared, md)


def _answer(
    md: TriggerMetadata,
    series: Sequence[GpuSeries],
    *,
    now: float,
    gpu_pods: Sequence[GpuPod],
    workload: str,
    engines: Sequence[EngineSeries],
    replicas: int | None,
    cold_start: float | None,
) -> Evaluation:
    """``answer`` without the request path and the learned capacity."""
    if md.metric in ENGINE_METRICS:
        result = _engine_answer(md, engines, now=now, gpu_pods=gpu_pods, workload=workload, replicas=replicas)
        return _decide(
            md, result, now=now, engines=engines, gpu_pods=gpu_pods, replicas=replicas, cold_start=cold_start
        )
    if md.scope != "workload":
        return evaluate(md, series, now=now)
    loading = {p.name for p in gpu_pods if p.ready is False}
    if loading:
        series = [s for s in series if s.pod not in loading]
        gpu_pods = [p for p in gpu_pods if p.name not in loading]
        if not gpu_pods:
            return _all_loading(md, len(loading), replicas)
    result = _gpu_answer(md, series, now=now, gpu_pods=gpu_pods, workload=workload, replicas=replicas)
    if loading:
        result = replace(result, loading=len(loading))
    if result.missing or result.pods == 0:
        return result
    if md.metric == "gpu_utilization" and md.engine_demand != "off":
        result = _uncap(md, result, engines, now)
    count = _count(result, replicas)
    if _ceil_ratio(result.value, md.target_value) >= count:
        return result  # not a scale-down: the guard has nothing to hold (and the newest value is not needed)
    try:
        present = evaluate(derived(md, window=0.0), series, now=now).value
    except NoDataError:
        return result
    return _guard(md, result, present, count)


def _as_rate(shared: TriggerMetadata, capacity: float | None) -> TriggerMetadata:
    """``targetValue: 80%``: the trigger with a target of that share of what one replica serves (the learned
    ``capacity``, ``replicaRate`` until one is)."""
    served = capacity if capacity is not None else shared.replica_rate
    assert served is not None  # parse_metadata requires replicaRate with a share
    target = shared.target_value / 100.0 * served
    return replace(shared, target_value=target, target_share=False, replica_rate=None)


def _in_share(result: Evaluation, shared: TriggerMetadata | None, rate: TriggerMetadata) -> Evaluation:
    """The answer in percent of one replica's capacity where the target is a share (``shared``), so that the
    HPA's ``ceil(value / 80)`` is ``ceil(demand / (0.8 x capacity))``; as it is otherwise."""
    if shared is None:
        return result
    k = shared.target_value / rate.target_value
    present = None if result.present is None else result.present * k
    return replace(result, value=result.value * k, aggregate=result.aggregate * k, present=present)


def replica_rate(md: TriggerMetadata, capacity: float | None) -> float | None:
    """Requests/s one replica is to serve, the request path's demand is divided by: ``replicaRate``, else
    ``targetValue`` with ``request_rate`` (the same figure), else the learned ``capacity``; the learned
    capacity where it is less than the figure given (a replica serves less than assumed). ``None``: not
    known (the request path then only wakes the workload and holds its count)."""
    rate = md.replica_rate
    if rate is None and md.metric == "request_rate":
        rate = md.target_value
    if capacity is not None and (rate is None or capacity < rate):
        return capacity  # a replica serves less than assumed: divide by what it serves
    return rate


def _through_request_path(
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
    where = f"request path {pd.demand:.1f} req/s"
    if blind:
        count = max(result.loading, replicas or 0)  # Pending pods too: coming, never scaled away
        if rate is None:
            need = 1 if pd.demand > 0 else 0
        else:
            need = math.ceil(pd.demand / rate - 1e-9)
        if need <= count:
            if result.loading or count == 0:
                return result  # every pod loading: the answer already holds them; none at all: 0
            # Pending pods only (not on a GPU node yet): held, not scaled away
            return replace(result, value=target * count, aggregate=target, active=True, decided=where)
        return replace(result, value=target * need, aggregate=target, active=True, decided=where)
    if pd.demand > 0 and not result.active:
        result = replace(result, active=True)  # requests still arrive: not idle, whatever the engines say
    if rate is None:
        return result
    floor = target * pd.demand / rate
    if _ceil_ratio(floor, target) <= _ceil_ratio(result.value, target):
        return result
    return replace(result, value=floor, active=True, decided=where)


def _missing_with_path(
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
        decided=f"request path {pd.demand:.1f} req/s (pods missing)",
    )


def _capacity_floor(
    md: TriggerMetadata, result: Evaluation, engines: Sequence[EngineSeries], now: float, capacity: float
) -> Evaluation:
    """``request_rate`` with a learned ``capacity`` below what the target assumes: while the Ready pods'
    queue grows, the answer is never below the replicas the present demand needs at that capacity,
    ``ceil(demand / capacity)``, so a trigger whose target a replica cannot serve does not stop short."""
    if result.pods == 0 or result.missing or capacity <= 0 or not _queue_grows(md, engines, result, now):
        return result
    need = math.ceil(result.value / capacity - 1e-9)
    if need <= _ceil_ratio(result.value, md.target_value):
        return result
    return replace(result, value=md.target_value * need, decided=f"capacity {capacity:.2f} req/s")


def _queue_grows(
    md: TriggerMetadata, engines: Sequence[EngineSeries], result: Evaluation, now: float
) -> bool:
    """Whether the requests waiting on the answer's pods grew over the window (newest over oldest reading)."""
    first = last = 0.0
    for e in engines:
        if e.pod not in result.fresh_pods or e.departed or not e.samples:
            continue
        recent = in_window(e.samples, now, max(md.window, 2.0))
        if len(recent) < 2:
            return False
        a, b = gauge(recent[0], "waiting", md.model), gauge(recent[-1], "waiting", md.model)
        if a is None or b is None:
            return False
        first, last = first + a, last + b
    return last > first


def _gpu_answer(
    md: TriggerMetadata,
    series: Sequence[GpuSeries],
    *,
    now: float,
    gpu_pods: Sequence[GpuPod],
    workload: str,
    replicas: int | None,
) -> Evaluation:
    """A GPU metric in workload scope over the Ready (or not known to be starting) pods."""
    if not series:
        if gpu_pods:
            if all(p.connected for p in gpu_pods):
                raise UnattributedPods(workload, len(gpu_pods))
            raise _missing(workload, md, missing_pods(md, series, gpu_pods, frozenset(), now=now), 0)
        return NO_PODS
    try:
        result = evaluate(md, series, now=now)
    except Exception as e:
        # share container: GPUs with fresh samples but no pod's share known are no "metric not reported";
        # their pods are missing pods ("share unknown"), as when some pods' shares are known
        unknown_shares = isinstance(e, NoDataError) and md.share == "container"
        if gpu_pods and (unknown_shares or any(not p.connected for p in gpu_pods)):
            raise _missing(
                workload, md, missing_pods(md, series, gpu_pods, frozenset(), now=now), 0
            ) from None
        raise
    missing = missing_pods(md, series, gpu_pods, result.fresh_pods, now=now)
    if not missing:
        return result
    fresh = len(result.fresh_pods)
    total = fresh + len(missing)
    if 100.0 * len(missing) / total > md.max_missing_percent:
        raise _missing(workload, md, missing, fresh)
    value = _hpa_rule(md, result.aggregate, fresh, len(missing), replicas)
    return replace(result, value=value, active=True, missing=len(missing), missing_where=_where(missing))


def demand_ratio(
    md: TriggerMetadata, engines: Sequence[EngineSeries], pods: frozenset[str], now: float
) -> float | None:
    """What the engines of ``pods`` are asked over what they serve, over the trigger's window: the requests
    arriving per second (``request_rate``'s arrivals: finished + the growth of those waiting and running)
    over those served per second (finished less aborted: a queue at its timeout sheds requests as aborts,
    which are not served), summed over the pods. ``None`` unless every one of ``pods`` has an engine that
    says both (the finished counter and the queue gauges), some request was served and some are waiting
    (with nothing waiting the engines keep up: whatever the counters say, the GPUs are not what caps the
    answer)."""
    by_pod = {e.pod: e for e in engines if not e.departed}
    arriving = served = waiting = 0.0
    rate_md = derived(md, metric="request_rate")
    for pod in pods:
        e = by_pod.get(pod)
        if e is None or e.missing is not None or not e.samples:
            return None
        a = pod_value(rate_md, e.samples, now)
        f = served_rate(md, e.samples, now)
        if a is None or f is None:
            return None
        arriving += a
        served += f
        waiting += gauge(e.samples[-1], "waiting", md.model) or 0.0
    if served <= 0 or waiting <= 0:
        return None
    return arriving / served


def _uncap(
    md: TriggerMetadata, result: Evaluation, engines: Sequence[EngineSeries], now: float
) -> Evaluation:
    """GPU utilization saturates at 100 %: it says what is served, not what is asked. Where the engines of
    every pod the answer counts say both (``demand_ratio``), the answer is the utilization the demand would
    take, ``value x arriving / served``, when that is more than the HPA's tolerance above it. It only ever
    raises the answer: a draining queue (fewer arriving than served) leaves the utilization as it is."""
    if not engines or not result.fresh_pods:
        return result
    ratio = demand_ratio(md, engines, result.fresh_pods, now)
    if ratio is None or ratio <= 1.0 + HPA_TOLERANCE:
        return result
    return replace(
        result, value=result.value * ratio, decided=f"uncapped by the engines' demand (x{ratio:.2f})"
    )


def _engine_answer(
    md: TriggerMetadata,
    engines: Sequence[EngineSeries],
    *,
    now: float,
    gpu_pods: Sequence[GpuPod],
    workload: str,
    replicas: int | None = None,
) -> Evaluation:
    """An engine metric: each pod's value from its engine's readings (``engine.pod_value``); additive
    metrics report the sum over the fresh pods (the per-pod mean times their count), the others the
    aggregate times the pods, as GPU metrics do. Pods without an engine value are missing pods."""
    loading = {p.name for p in gpu_pods if p.ready is False}
    known = {p.name: p for p in gpu_pods if p.name not in loading}
    values: dict[str, float] = {}
    why: dict[str, str] = {}
    newest = math.inf
    for e in engines:
        if e.pod in loading or e.departed:
            continue  # starting: not in the Service's endpoints yet; departed: gone
        value = None if e.missing is not None else pod_value(md, e.samples, now)
        if value is None:
            why[e.pod] = e.missing or ("no fresh engine reading" if e.samples else "no engine reading")
            continue
        values[e.pod] = value
        newest = min(newest, max(0.0, now - e.samples[-1].timestamp))
        known.setdefault(e.pod, GpuPod(e.pod, "?"))
    if not known:
        return _all_loading(md, len(loading), replicas) if loading else NO_PODS
    missing = [
        Missing(p.name, p.node, _reason(p) or why.get(p.name, "no engine reading"))
        for p in known.values()
        if p.name not in values
    ]
    fresh = len(values)
    if not values:
        raise _missing(workload, md, missing, 0)
    additive = md.metric in ADDITIVE_METRICS
    per_pod = list(values.values())
    agg = math.fsum(per_pod) / fresh if additive else aggregate(per_pod, md.aggregation)
    activity = agg * fresh if additive else agg
    result = Evaluation(
        value=agg * fresh,
        aggregate=agg,
        active=activity > md.activation_value,
        gpus=0,
        pods=fresh,
        skipped=len(missing),
        newest_sample_age=newest,
        fresh_pods=frozenset(values),
        loading=len(loading),
    )
    if not missing:
        return result
    if 100.0 * len(missing) / (fresh + len(missing)) > md.max_missing_percent:
        raise _missing(workload, md, missing, fresh)
    value = _hpa_rule(md, agg, fresh, len(missing), replicas)
    return replace(result, value=value, active=True, missing=len(missing), missing_where=_where(missing))


def _count(result: Evaluation, replicas: int | None) -> int:
    """The workload's replicas as the HPA counts them: ``status.replicas`` where known, else its GPU pods."""
    return max(replicas or 0, result.pods + result.missing + result.loading)


def _all_loading(md: TriggerMetadata, loading: int, replicas: int | None) -> Evaluation:
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
        decided="all pods loading",
    )


def _ceil_ratio(value: float, target: float) -> int:
    """The HPA's ``ceil(value / target)`` (with a hair of slack for floating point)."""
    return math.ceil(value / target - 1e-9)


def _guard(md: TriggerMetadata, result: Evaluation, present: float, count: int) -> Evaluation:
    """Scale-down that holds: an answer that would take the workload below ``count`` replicas never goes
    below what the present value needs (``ceil(present / target)``, at most ``count``): so it never takes
    the workload to N-1 replicas when N-1 at the target would not carry the present demand (the smoothed
    value lags a rise; a forecast is never below the present). ``kvCacheGuard``'s floor is ``_kv_floor``."""
    target = md.target_value
    if count <= 0 or _ceil_ratio(result.value, target) >= count:
        return replace(result, present=present)
    floor = min(present, target * count)
    if floor > result.value and _ceil_ratio(floor, target) > _ceil_ratio(result.value, target):
        return replace(result, value=floor, decided="N-1 guard", present=present)
    return replace(result, present=present)


def _decide(
    md: TriggerMetadata,
    result: Evaluation,
    *,
    now: float,
    engines: Sequence[EngineSeries],
    gpu_pods: Sequence[GpuPod],
    replicas: int | None,
    cold_start: float | None,
) -> Evaluation:
    """An engine answer with the engine decisions on top: the forecast one cold start ahead
    (``scaleAhead``), the backlog hold (a served rate never scales down while requests wait), the KV-cache
    floor, the N-1 guard. An answer with nothing measured is left as it is;
    one the missing-pod rule made gets the KV-cache floor alone, each missing pod counted as one replica
    needed (as the HPA's rule counts a missing pod at the target when scaling down), so missing pods never
    lower what the floor holds."""
    if result.pods == 0:
        return result
    loading = {p.name for p in gpu_pods if p.ready is False}
    ready = [e for e in engines if e.pod in result.fresh_pods and e.pod not in loading and not e.departed]
    count = _count(result, replicas)
    if result.missing:
        floored = _kv_floor(md, result, ready, count, result.missing)
        return floored if floored is not None else result
    decided = result
    if md.scale_ahead == "auto" and cold_start is not None and cold_start > 0:
        past = [e for e in engines if e.departed or (e.pod not in loading and e.samples)]
        ahead = _ahead(md, past, now, cold_start, result.value)
        if ahead.trend and ahead.value > result.value:
            decided = replace(result, value=ahead.value, decided=f"ahead {cold_start:.0f} s")
    if _ceil_ratio(decided.value, md.target_value) >= count:
        return decided  # not a scale-down: the floor and the guard have nothing to hold
    if md.metric in SERVED_RATES and _backlog(md, ready, now) >= 1.0:
        return replace(decided, value=md.target_value * count, decided="backlog hold")
    present = _engine_total(derived(md, window=0.0), ready, now)
    floored = _kv_floor(md, decided, ready, count, 0)
    if floored is not None:
        return replace(floored, present=present)
    out = _guard(md, decided, present, count)
    return out if out.decided else replace(out, decided=decided.decided)


# Rates counted as requests (or tokens) leave the engine: capped at what the Ready pods serve. While
# requests wait, the demand is more than that by an amount they cannot say (released vLLM counts no request a
# client abandons in the queue: vllm-project/vllm#31503), so a scale-down is held.
SERVED_RATES: frozenset[str] = frozenset({"request_rate", "generation_tokens_per_second"})


def _backlog(md: TriggerMetadata, ready: Sequence[EngineSeries], now: float) -> float:
    """The requests waiting on the Ready pods: the mean over the window of each pod's waiting, summed."""
    waiting = derived(md, metric="queue_length")
    values = [pod_value(waiting, e.samples, now) for e in ready if e.samples]
    return math.fsum(v for v in values if v is not None)


def _kv_floor(
    md: TriggerMetadata, result: Evaluation, ready: Sequence[EngineSeries], count: int, missing: int
) -> Evaluation | None:
    """``kvCacheGuard``'s floor: the replicas that keep the Ready pods' mean KV-cache fill at or below the
    guard (``ceil(pods x mean fill / guard)``, plus ``missing`` pods each counted as needed), at most
    ``count``; the answer raised to it, or ``None`` where it does not raise it."""
    guard = md.kv_cache_guard
    if guard is None or _ceil_ratio(result.value, md.target_value) >= count:
        return None
    kv = [gauge(e.samples[-1], "kv_cache_usage", md.model) for e in ready if e.samples]
    known = [v for v in kv if v is not None]
    if not known:
        return None
    floor = min(count, math.ceil(math.fsum(known) / guard - 1e-9) + missing)
    if floor <= _ceil_ratio(result.value, md.target_value):
        return None
    return replace(result, value=md.target_value * floor, decided="KV-cache guard")


# The forecast looks back over the cold start, at most this far (the scaler's --history, 120 s by default,
# is what it holds), in at most this many steps.
LOOKBACK_MAX_S = 120.0
LOOKBACK_POINTS = 24


def _engine_total(md: TriggerMetadata, engines: Sequence[EngineSeries], now: float) -> float:
    """The workload's value at ``now`` over ``engines``: the sum of the pods' values (additive metrics;
    the only ones ``scaleAhead`` allows), a pod without one counting nothing."""
    values = [pod_value(md, e.samples, now) for e in engines if not e.departed or _there(e, now)]
    return math.fsum(v for v in values if v is not None)


def _there(e: EngineSeries, t: float) -> bool:
    """Whether a departed pod was still serving at ``t``: up to a reading interval past its last reading (its
    last value must not count on after it left, beside the pods that took its share)."""
    s = e.samples
    if not s:
        return False
    spacing = s[-1].timestamp - s[-2].timestamp if len(s) >= 2 else 0.0
    return t < s[-1].timestamp + spacing


def _ahead(
    md: TriggerMetadata, engines: Sequence[EngineSeries], now: float, horizon: float, present: float
) -> Forecast:
    """``forecast.forecast`` of the workload's value over the look-back (the cold start, at most
    ``LOOKBACK_MAX_S``, at least two windows), ``LOOKBACK_POINTS`` instants at most (one per reading
    interval at least)."""
    lookback = min(horizon, LOOKBACK_MAX_S)
    lookback = max(lookback, 2 * md.window)
    intervals = [e.samples[-1].timestamp - e.samples[-2].timestamp for e in engines if len(e.samples) >= 2]
    interval = min(intervals) if intervals else 1.0
    step = max(lookback / LOOKBACK_POINTS, interval)
    times: list[float] = []
    t = now - lookback
    while t <= now + 1e-9:
        times.append(t)
        t += step
    values: list[list[float]] = [[] for _ in times]
    for e in engines:
        memo = e.memo.setdefault(md, {}) if e.memo is not None else None
        for i, t in enumerate(times):
            if e.departed and not _there(e, t):
                continue
            v = pod_value_at(md, e.samples, t, memo)
            if v is not None:
                values[i].append(v)
    # each instant's sum as _engine_total makes it (fsum: exact, whatever the order of the pods)
    points = [(t, math.fsum(vs)) for t, vs in zip(times, values, strict=True)]
    return forecast(points, present, horizon)


def _reason(p: GpuPod) -> str | None:
    """Why a pod is missing whatever the metric, when its node says so."""
    if not p.reported:
        return "not reported by its node's agent"
    if p.forgotten:
        return "node forgotten"
    if not p.connected:
        return "agent gone"
    return None


def _hpa_rule(
    md: TriggerMetadata, aggregate: float, fresh: int, missing: int, replicas: int | None = None
) -> float:
    """The value from which the HPA's ``ceil(value / target)`` is what it computes for pods without metrics:
    missing pods count 0 on scale-up and the target on scale-down, and a flip or a ratio within the tolerance
    keeps the current count. The new ratio is over the pods with and without metrics (as the HPA computes
    it); the count kept is the target's ``replicas`` where known (Pending pods too: the HPA's AverageValue
    rule divides by ``status.replicas``), else those pods."""
    target = md.target_value
    counted = fresh + missing
    hold = target * max(counted, replicas or 0)
    ratio = aggregate / target
    if ratio > 1.0:
        scaled = aggregate * fresh
        return scaled if scaled / (target * counted) > 1.0 + HPA_TOLERANCE else hold
    if ratio < 1.0:
        scaled = aggregate * fresh + target * missing
        return scaled if scaled / (target * counted) < 1.0 - HPA_TOLERANCE else hold
    return hold


def _where(missing: Sequence[Missing]) -> tuple[str, ...]:
    """Where missing pods are and why, per node and reason: ``node-3 (agent gone: 2 pods)``."""
    where = Counter((m.node, m.reason) for m in missing)
    return tuple(
        f"{node} ({reason}: {n} pod{'s' if n != 1 else ''})" for (node, reason), n in sorted(where.items())
    )


def _missing(workload: str, md: TriggerMetadata, missing: Sequence[Missing], fresh: int) -> MissingPods:
    limit = md.max_missing_percent
    return MissingPods(workload, missing=len(missing), fresh=fresh, limit=limit, nodes=_where(missing))
