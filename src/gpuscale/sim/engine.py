"""The discrete-time loop: one-second steps of workload, metric pipeline, KEDA operator and HPA.

Pure and deterministic: ``simulate(policy, workload, demand, config, duration)`` returns a ``Timeline``.
Each second ``t``: pods advance (Pending -> Running -> Ready), the true state is recorded, then KEDA polls
(every ``pollingInterval``, plus every sample for ``external-push`` triggers), then the HPA syncs (every
sync period), each reading the metric through its pipeline; replica changes create or delete pods at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .controller import reconcile
from .hpa import (
    ControllerConfig,
    ExternalReading,
    HpaSpec,
    HpaState,
    MetricReading,
    PodInfo,
    PodsReading,
    ScaleTarget,
)
from .keda import KedaState, ScaledObjectSpec, TriggerSpec, fallback_milli, request_scale
from .pipeline import (
    GpuscalePipeline,
    PrometheusPipeline,
    Signal,
    evaluate_scalar,
    per_pod_values,
)
from .quantity import keda_milli
from .workload import Observation, Pod, Workload, observe, scale_pods

__all__ = ["MetricSource", "Policy", "Timeline", "simulate"]


@dataclass(frozen=True)
class MetricSource:
    """Where one HPA metric comes from. ``trigger`` is set for ScaledObject policies."""

    signal: Signal
    via: Literal["gpuscale", "prometheus"]
    trigger: TriggerSpec | None = None


@dataclass(frozen=True)
class Policy:
    name: str
    hpa: HpaSpec
    sources: tuple[MetricSource, ...]
    scaled_object: ScaledObjectSpec | None = None
    gpuscale: GpuscalePipeline = field(default_factory=GpuscalePipeline)
    prometheus: PrometheusPipeline = field(default_factory=PrometheusPipeline)
    hpa_offset_seconds: int = 0
    keda_offset_seconds: int = 0
    initial_replicas: int | None = None
    # The ScaledObject is created at t=0 (KEDA: no lastActiveTime yet, so an idle workload may go to zero
    # after initialCooldownPeriod); by default it has run before and counts as active at t=0.
    new_scaled_object: bool = False


@dataclass(frozen=True)
class Timeline:
    """One entry per simulated second. ``metric`` is the first metric's value as last fetched (NaN before)."""

    policy: str
    demand: tuple[float, ...]
    capacity: tuple[float, ...]
    desired: tuple[int, ...]
    ready: tuple[int, ...]
    pods: tuple[int, ...]
    metric: tuple[float, ...]
    utilization: tuple[float, ...]


@dataclass
class _Run:
    """Mutable loop state, private to one ``simulate`` call (the loop is the only writer)."""

    pods: tuple[Pod, ...]
    next_id: int
    replicas: int
    hpa_state: HpaState
    keda_state: KedaState
    push_active: tuple[bool | None, ...]
    history: list[Observation]
    metric: float = float("nan")


def _sampled(run: _Run, times: tuple[int, ...]) -> list[Observation]:
    return [run.history[s] for s in times if 0 <= s < len(run.history)]


def _trigger_value(policy: Policy, src: MetricSource, run: _Run, t: int) -> tuple[float | None, float | None]:
    """(value reported to KEDA/HPA, value compared with the activation threshold); None = error."""
    trig = src.trigger
    if src.via == "prometheus":
        value = evaluate_scalar(src.signal, _sampled(run, policy.prometheus.sample_times(t)))
        if value is None and (trig is None or trig.ignore_null_values):
            value = 0.0  # empty result -> 0 under ignoreNullValues (the default)
        return value, value
    window = trig.window_seconds if trig is not None else 0
    obs = _sampled(run, policy.gpuscale.sample_times(t, window))
    values = per_pod_values(obs)
    agg = evaluate_scalar(src.signal, obs)
    if (agg is None or not values) and trig is not None and trig.scope == "workload":
        # No pod with samples: none exists, or all are Pending. The scaler sees an unscheduled pod on no
        # node, and a scheduled one's GPU (allocated at admission, before the image pull) at 0 %: either
        # way 0, inactive. (Its UNAVAILABLE for the seconds before an agent attributes a new pod's GPU
        # is not modelled.)
        return 0.0, 0.0
    if agg is None or not values:
        return None, None  # node or pool scope without GPU samples: UNAVAILABLE, never a made-up 0
    if trig is not None and trig.scope == "workload":
        return agg * len(values), agg  # aggregate x pods with samples, AverageValue
    return agg, agg


def _readings(policy: Policy, run: _Run, t: int, pods: tuple[PodInfo, ...]) -> tuple[MetricReading, ...]:
    out: list[MetricReading] = []
    so = policy.scaled_object
    ready = sum(1 for p in pods if p.ready)
    for i, (metric, src) in enumerate(zip(policy.hpa.metrics, policy.sources, strict=True)):
        if metric.source == "Pods":
            obs = _sampled(run, policy.prometheus.sample_times(t))
            names = {p.name for p in pods}
            values = {k: keda_milli(v) for k, v in per_pod_values(obs).items() if k in names}
            out.append(PodsReading(values) if values else None)
            if i == 0:
                run.metric = sum(values.values()) / len(values) / 1000 if values else float("nan")
            continue
        value, _ = _trigger_value(policy, src, run, t)
        if so is not None:
            failures = list(run.keda_state.failures)
            failures[i] = failures[i] + 1 if value is None else 0
            run.keda_state = KedaState(
                run.keda_state.last_active_time, run.keda_state.created_at, tuple(failures)
            )
            fb = so.fallback
            if fb is not None and failures[i] > fb.failure_threshold:  # fallback.go: NumberOfFailures > it
                out.append(
                    ExternalReading(
                        (fallback_milli(fb, metric.target_type, metric.target_milli, run.replicas, ready),)
                    )
                )
                continue
        out.append(ExternalReading((keda_milli(value),)) if value is not None else None)
        if i == 0:
            run.metric = value if value is not None else float("nan")
    return tuple(out)


def _pod_infos(pods: tuple[Pod, ...], t: int) -> tuple[PodInfo, ...]:
    return tuple(
        PodInfo(p.name, "Running" if t >= p.running_at else "Pending", t >= p.ready_at) for p in pods
    )


def _keda_poll(policy: Policy, so: ScaledObjectSpec, run: _Run, t: int, push_only: bool) -> None:
    active = error = False
    changed = False
    push = list(run.push_active)
    for i, src in enumerate(policy.sources):
        trig = src.trigger
        if trig is None or (push_only and not trig.push):
            continue
        _, act_value = _trigger_value(policy, src, run, t)
        is_active = act_value is not None and act_value > trig.activation
        error = error or act_value is None
        active = active or is_active
        if trig.push:
            changed = changed or push[i] != is_active
            push[i] = is_active
    run.push_active = tuple(push)
    if push_only:
        # StreamIsActive sends on change; KEDA (2.18+) acts on a pushed true only: a pushed false is ignored,
        # and deactivation comes from polling and cooldownPeriod (kedacore/keda#6986)
        if not changed or not active:
            return
    decision = request_scale(so, run.keda_state, run.replicas, active, error and not push_only, t)
    run.keda_state = decision.state
    if decision.replicas is not None:
        run.replicas = decision.replicas


def simulate(
    policy: Policy, workload: Workload, demand: tuple[float, ...], config: ControllerConfig
) -> Timeline:
    """Run ``policy`` against ``demand`` (one value per second) and return the per-second timeline."""
    initial = workload.initial_replicas if policy.initial_replicas is None else policy.initial_replicas
    pods = tuple(Pod(i, -1, 0, 0) for i in range(initial))
    so = policy.scaled_object
    n = len(policy.sources)
    run = _Run(
        pods,
        initial,
        initial,
        HpaState(),
        KedaState(0 if initial > 0 and not policy.new_scaled_object else None, 0, (0,) * n),
        (None,) * n,
        [],
    )
    has_push = so is not None and any(s.trigger is not None and s.trigger.push for s in policy.sources)
    cols: tuple[list[float], ...] = ([], [], [], [], [], [], [])
    sync = config.sync_period_seconds
    for t, d in enumerate(demand):
        obs = observe(run.pods, d, workload, t)
        if run.history and _same(run.history[-1], obs):
            obs = Observation(d, obs.util, run.history[-1].ready, run.history[-1].loading)
        run.history.append(obs)
        if so is not None:
            if (
                t >= policy.keda_offset_seconds
                and (t - policy.keda_offset_seconds) % so.polling_interval == 0
            ):
                _keda_poll(policy, so, run, t, push_only=False)
            elif has_push and t % policy.gpuscale.sampling_interval == 0:
                _keda_poll(policy, so, run, t, push_only=True)
        if t >= policy.hpa_offset_seconds and (t - policy.hpa_offset_seconds) % sync == 0:
            infos = _pod_infos(run.pods, t)
            target = ScaleTarget(run.replicas, len(run.pods), infos)
            disabled = run.replicas == 0 and policy.hpa.min_replicas != 0  # no metrics are read
            readings = (None,) * n if disabled else _readings(policy, run, t, infos)
            result = reconcile(policy.hpa, config, run.hpa_state, target, readings, t)
            run.hpa_state = result.state
            if result.rescale:
                run.replicas = result.desired
        if run.replicas != len(run.pods):
            run.pods, run.next_id = scale_pods(run.pods, run.replicas, t, workload, run.next_id)
        ready = sum(1 for p in run.pods if t >= p.ready_at)
        capacity = ready * workload.capacity_per_replica
        for col, value in zip(
            cols,
            (
                d,
                capacity,
                run.replicas,
                ready,
                len(run.pods),
                run.metric,
                min(100.0, 100.0 * d / capacity) if capacity > 0 else float("nan"),
            ),
            strict=True,
        ):
            col.append(float(value))
    return Timeline(
        policy=policy.name,
        demand=tuple(cols[0]),
        capacity=tuple(cols[1]),
        desired=tuple(int(v) for v in cols[2]),
        ready=tuple(int(v) for v in cols[3]),
        pods=tuple(int(v) for v in cols[4]),
        metric=tuple(cols[5]),
        utilization=tuple(cols[6]),
    )


def _same(a: Observation, b: Observation) -> bool:
    return a.ready == b.ready and a.loading == b.loading
