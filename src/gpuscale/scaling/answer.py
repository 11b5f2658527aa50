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
  scope (``NoDataError`` when no GPU has a fresh sample);
* then the decisions of ``decisions``, each a named step, in the order ``decisions.decide`` runs them.

What it decides on is one ``view.WorkloadView``, built by the scaler and the simulator with the same
builders.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .aggregate import Evaluation, GpuSeries, aggregate, evaluate
from .decisions import HPA_TOLERANCE, all_loading, decide, decide_missing
from .errors import MissingPods, NoDataError, UnattributedPods
from .keys import ADDITIVE_METRICS, ENGINE_METRICS
from .metadata import TriggerMetadata
from .signals import Signals
from .view import GpuPod, WorkloadView

__all__ = ["HPA_TOLERANCE", "NO_PODS", "GpuPod", "Missing", "WorkloadView", "answer", "missing_pods"]

NO_PODS = Evaluation(
    value=0.0, aggregate=0.0, active=False, gpus=0, pods=0, skipped=0, newest_sample_age=math.inf
)


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


def answer(md: TriggerMetadata, view: WorkloadView, now: float) -> Evaluation:
    """The answer for ``md`` over ``view`` (the trigger's scope at ``now``, Unix seconds): the measured value
    and the missing-pod rule, then the decisions (``decisions.decide``). Raise ``UnattributedPods``,
    ``MissingPods``, ``NoDataError`` or ``RequestPathMissing`` where there is no honest value."""
    shared = md if md.target_share else None
    if shared is not None:
        md = _as_rate(shared, view.capacity)
    signals = Signals(now)
    try:
        result = _measured(md, view, now, signals)
    except MissingPods as e:
        held = decide_missing(md, e, view, now)
        if held is None:
            raise
        return _in_share(held, shared, md)
    return _in_share(decide(md, result, view, now, signals), shared, md)


def _measured(md: TriggerMetadata, view: WorkloadView, now: float, signals: Signals) -> Evaluation:
    """The value as the trigger measures it over the view, with the missing-pod rule: an engine metric
    over the Ready pods' engines, a GPU metric over their GPUs (in workload scope; over the scope's GPUs
    otherwise), or every pod loading (``decisions.all_loading``)."""
    if md.metric in ENGINE_METRICS:
        return _engine_answer(md, view, now, signals)
    if md.scope != "workload":
        return evaluate(md, view.series, now=now)
    loading = view.loading()
    series, gpu_pods = view.series, view.pods
    if loading:
        series = [s for s in series if s.pod not in loading]
        gpu_pods = [p for p in gpu_pods if p.name not in loading]
        if not gpu_pods:
            return all_loading(md, len(loading), view.replicas)
    result = _gpu_answer(md, series, now=now, gpu_pods=gpu_pods, workload=view.name, replicas=view.replicas)
    return replace(result, loading=len(loading)) if loading else result


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


def _engine_answer(md: TriggerMetadata, view: WorkloadView, now: float, signals: Signals) -> Evaluation:
    """An engine metric: each pod's value from its engine's readings (``engine.pod_value``); additive
    metrics report the sum over the fresh pods (the per-pod mean times their count), the others the
    aggregate times the pods, as GPU metrics do. Pods without an engine value are missing pods."""
    loading = view.loading()
    known = {p.name: p for p in view.pods if p.name not in loading}
    values: dict[str, float] = {}
    why: dict[str, str] = {}
    newest = math.inf
    for e in view.engines:
        if e.pod in loading or e.departed:
            continue  # starting: not in the Service's endpoints yet; departed: gone
        value = None if e.missing is not None else signals.value(md, e)
        if value is None:
            why[e.pod] = e.missing or ("no fresh engine reading" if e.samples else "no engine reading")
            continue
        values[e.pod] = value
        newest = min(newest, max(0.0, now - e.samples[-1].timestamp))
        known.setdefault(e.pod, GpuPod(e.pod, "?"))
    if not known:
        return all_loading(md, len(loading), view.replicas) if loading else NO_PODS
    missing = [
        Missing(p.name, p.node, _reason(p) or why.get(p.name, "no engine reading"))
        for p in known.values()
        if p.name not in values
    ]
    fresh = len(values)
    if not values:
        raise _missing(view.name, md, missing, 0)
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
        raise _missing(view.name, md, missing, fresh)
    value = _hpa_rule(md, agg, fresh, len(missing), view.replicas)
    return replace(result, value=value, active=True, missing=len(missing), missing_where=_where(missing))


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
