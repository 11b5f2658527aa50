"""The discrete-time loop: one-second steps of workload, metric pipeline, KEDA operator and HPA.

Pure and deterministic: ``simulate(policy, workload, demand, config, duration)`` returns a ``Timeline``.
Each second ``t``: pods advance (Pending -> Running -> Ready), the true state is recorded, the agents sample
the Running pods' GPUs, then KEDA polls (every ``pollingInterval``, plus every sample for ``external-push``
triggers), then the HPA syncs (every sync period), each reading the metric through its pipeline; replica
changes create or delete pods at once (a deleted pod holds its GPU ``terminationSeconds`` longer).

A gpuscale trigger is answered by the scaler's own code (``gpuscale.scaling.answer``) over the samples the
scaler would hold: one GPU per Running pod, sampled every ``samplingIntervalSeconds``, visible
``delaySeconds`` late, read half a second after the tick (a KEDA poll falls between two samples). A
``samples-missing`` fault stops some pods' samples; they age past ``staleAfter`` as they would in the
scaler.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from ..model import GpuSample
from ..scaling.aggregate import GpuSeries
from ..scaling.answer import GpuPod, answer
from ..scaling.errors import MissingPods, NoDataError, UnattributedPods
from .controller import reconcile
from .faults import Fault
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
    faults: tuple[Fault, ...] = ()


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
    # what the scaler holds of each Running pod's GPU: its samples, oldest first (gpuscale triggers only)
    samples: dict[str, list[GpuSample]] = field(default_factory=dict)
    # pods deleted and still holding their GPUs: (pod, the second it is gone)
    terminating: tuple[tuple[Pod, int], ...] = ()


def _sampled(run: _Run, times: tuple[int, ...]) -> list[Observation]:
    return [run.history[s] for s in times if 0 <= s < len(run.history)]


# A KEDA poll or an HPA sync at second t reads the scaler half a second after that second's sample.
_READ_OFFSET = 0.5
_UUID_PREFIX = "GPU-sim-"


class _Head(Sequence[GpuSample]):
    """The first ``n`` samples of a pod's history (those the scaler has received), without a copy."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[GpuSample], n: int) -> None:
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> GpuSample: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[GpuSample]: ...
    def __getitem__(self, i: int | slice) -> GpuSample | Sequence[GpuSample]:
        if isinstance(i, slice):
            return self._items[: self._n][i]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._items[i % self._n]


def _fault(policy: Policy, kind: str, t: float) -> Fault | None:
    return next((f for f in policy.faults if f.kind == kind and f.active(t)), None)


def gpuscale_series(samples: dict[str, list[GpuSample]], visible_until: float) -> list[GpuSeries]:
    """The GPU series the scaler holds: each pod's samples taken at or before ``visible_until``."""
    out: list[GpuSeries] = []
    for name, history in samples.items():
        n = bisect.bisect_right(history, visible_until, key=lambda x: x.timestamp)
        if n:
            out.append(GpuSeries(_UUID_PREFIX + name, _Head(history, n), pod=f"sim/{name}"))
    return out


def gpuscale_reading(trig: TriggerSpec, series: Sequence[GpuSeries], now: float) -> tuple[float | None, bool]:
    """(value for GetMetrics, IsActive) of a gpuscale trigger, as the scaler answers them; ``None``: the
    scaler answers ``UNAVAILABLE``. Every series is one of the workload's Running pods, each asking for a
    GPU."""
    assert trig.metadata is not None
    try:
        pods = [GpuPod(s.pod or s.uuid, "sim") for s in series]
        result = answer(trig.metadata, series, now=now, gpu_pods=pods)
    except (NoDataError, UnattributedPods, MissingPods):
        return None, False
    return result.value, result.active


def _trigger_value(policy: Policy, src: MetricSource, run: _Run, t: int) -> tuple[float | None, bool]:
    """(value reported to KEDA/HPA, whether the trigger is active); a value of None is an error."""
    trig = src.trigger
    if _fault(policy, "trigger-error", t) is not None:
        return None, False
    if src.via == "prometheus":
        value = evaluate_scalar(src.signal, _sampled(run, policy.prometheus.sample_times(t)))
        if value is None and (trig is None or trig.ignore_null_values):
            value = 0.0  # empty result -> 0 under ignoreNullValues (the default)
        activation = trig.activation if trig is not None else 0.0
        return value, value is not None and value > activation
    assert trig is not None
    series = gpuscale_series(run.samples, t - policy.gpuscale.delay_seconds)
    return gpuscale_reading(trig, series, t + _READ_OFFSET)


def _sample_gpus(policy: Policy, run: _Run, obs: Observation, t: int) -> None:
    """The agents' sampling round at ``t``: a sample of each Running pod's GPU (Ready: ``util``, loading:
    0), except the pods a ``samples-missing`` fault darkens; deleted pods are forgotten."""
    names = {p.name for p in run.pods}
    for name in [n for n in run.samples if n not in names]:
        del run.samples[name]
    if t % policy.gpuscale.sampling_interval:
        return
    values = obs.samples()
    dark: set[str] = set()
    fault = _fault(policy, "samples-missing", t)
    if fault is not None:
        running = sorted((p for p in run.pods if p.name in values), key=lambda p: p.id)
        dark = {p.name for p in running[: fault.pods]}
    keep = _horizon(policy)
    for name, util in values.items():
        if name in dark:
            continue
        history = run.samples.setdefault(name, [])
        history.append(GpuSample(_UUID_PREFIX + name, float(t), gpu_utilization=util))
        if len(history) > 2 * keep and history[0].timestamp < t - keep:
            del history[: len(history) - keep]


def _horizon(policy: Policy) -> int:
    """How many samples per pod any of the policy's gpuscale triggers can still count."""
    longest = max(
        (s.trigger.metadata.stale_after for s in policy.sources if s.trigger and s.trigger.metadata),
        default=0.0,
    )
    return int(longest + policy.gpuscale.delay_seconds) // policy.gpuscale.sampling_interval + 2


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
    failures = list(run.keda_state.failures)
    fb = so.fallback
    for i, src in enumerate(policy.sources):
        trig = src.trigger
        if trig is None or (push_only and not trig.push):
            continue
        value, is_active = _trigger_value(policy, src, run, t)
        failed = value is None
        if not push_only:
            # KEDA 2.19+ (kedacore/keda#7244): the polling loop counts a trigger's failures as the metrics
            # server does, and past failureThreshold the trigger counts as active with its fallback value
            # (so a workload at zero is woken, and lastActiveTime is refreshed while fallback is in force)
            failures[i] = failures[i] + 1 if failed else 0
            if failed and fb is not None and failures[i] > fb.failure_threshold:
                failed, is_active = False, True
        error = error or failed
        active = active or is_active
        if trig.push:
            changed = changed or push[i] != is_active
            push[i] = is_active
    run.push_active = tuple(push)
    if not push_only:
        state = run.keda_state
        run.keda_state = KedaState(state.last_active_time, state.created_at, tuple(failures))
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
    has_gpuscale = any(s.via == "gpuscale" for s in policy.sources)
    cols: tuple[list[float], ...] = ([], [], [], [], [], [], [])
    sync = config.sync_period_seconds
    for t, d in enumerate(demand):
        obs = observe(run.pods, d, workload, t)
        if run.history and _same(run.history[-1], obs):
            obs = Observation(d, obs.util, run.history[-1].ready, run.history[-1].loading)
        run.history.append(obs)
        if has_gpuscale:
            _sample_gpus(policy, run, obs, t)
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
            before = run.pods
            run.pods, run.next_id = scale_pods(run.pods, run.replicas, t, workload, run.next_id)
            if workload.termination_seconds:
                kept = {p.id for p in run.pods}
                gone = tuple((p, t + workload.termination_seconds) for p in before if p.id not in kept)
                run.terminating += gone
        if run.terminating:
            run.terminating = tuple((p, end) for p, end in run.terminating if end > t)
        ready = sum(1 for p in run.pods if t >= p.ready_at)
        capacity = ready * workload.capacity_per_replica
        for col, value in zip(
            cols,
            (
                d,
                capacity,
                run.replicas,
                ready,
                len(run.pods) + len(run.terminating),
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
