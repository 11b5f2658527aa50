"""The discrete-time loop: one-second steps of workload, metric pipeline, KEDA operator and HPA.

Pure and deterministic: ``simulate(policy, workload, demand, config, duration)`` returns a ``Timeline``.
Each second ``t``: pods advance (Pending -> Running -> Ready), the Ready pods serve the second's demand
through the engines' queue (``workload.EngineQueue``), the true state is recorded, the agents sample the
Running pods' GPUs, then KEDA polls (every ``pollingInterval``, plus every sample for ``external-push``
triggers), then the HPA syncs (every sync period), each reading the metric through its pipeline; replica
changes create or delete pods at once (a deleted pod holds its GPU ``terminationSeconds`` longer). The
capacity and Ready pods recorded for ``t`` are those that served it, before that second's decisions.

A gpuscale trigger is answered by the scaler's own code (``gpuscale.scaling.answer``) over the view
(``scaling.view.WorkloadView``) the scaler would hold, kept by the scaler's rules (``scaling.view``: deleted
pods' readings, cold starts learned): one GPU per Running pod, sampled every ``samplingIntervalSeconds``,
visible ``delaySeconds`` late, read half a second after the tick (a KEDA poll falls between two samples). A
``samples-missing`` fault stops some pods' samples; they age past ``staleAfter`` as they would in the
scaler.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from ..scaling.coldstart import ColdStarts
from ..scaling.requestpath import PathReading
from ..scaling.view import PodStart, learn_cold_starts
from .batching import TokenEngines, TokenTimeline, token_observation
from .controller import reconcile
from .hpa import ControllerConfig, ExternalReading, HpaState, MetricReading, PodInfo, PodsReading, ScaleTarget
from .keda import KedaState, ScaledObjectSpec, fallback_milli, request_scale
from .pipeline import per_pod_values
from .policy import Policy, Timeline, oracle_replicas
from .quantity import keda_milli
from .requests import Request
from .run import RunState, sampled
from .scaler import PATH_KEPT, WORKLOAD, reads_engines, sample_gpus, trigger_value
from .workload import EngineQueue, Observation, Pod, Served, Workload, observe, scale_pods

__all__ = ["simulate"]


def _readings(policy: Policy, run: RunState, t: int, pods: tuple[PodInfo, ...]) -> tuple[MetricReading, ...]:
    out: list[MetricReading] = []
    so = policy.scaled_object
    ready = sum(1 for p in pods if p.ready)
    for i, (metric, src) in enumerate(zip(policy.hpa.metrics, policy.sources, strict=True)):
        if metric.source == "Pods":
            obs = sampled(run, policy.prometheus.sample_times(t))
            names = {p.name for p in pods}
            per_pod = per_pod_values(obs, src.signal.field)
            values = {k: keda_milli(v) for k, v in per_pod.items() if k in names}
            out.append(PodsReading(values) if values else None)
            if i == 0:
                run.metric = sum(values.values()) / len(values) / 1000 if values else float("nan")
            continue
        value, _ = trigger_value(policy, src, run, t)
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


def _keda_poll(policy: Policy, so: ScaledObjectSpec, run: RunState, t: int, push_only: bool) -> None:
    active = error = False
    changed = False
    push = list(run.push_active)
    failures = list(run.keda_state.failures)
    fb = so.fallback
    for i, src in enumerate(policy.sources):
        trig = src.trigger
        if trig is None or (push_only and not trig.push):
            continue
        value, is_active = trigger_value(policy, src, run, t)
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
    policy: Policy,
    workload: Workload,
    demand: tuple[float, ...],
    config: ControllerConfig,
    requests: Iterator[Sequence[Request]] | None = None,
) -> Timeline:
    """Run ``policy`` against ``demand`` (one value per second) and return the per-second timeline;
    ``requests``: each second's requests, for the token model (``workload.replica_model`` "tokens")."""
    run = _start(policy, workload)
    plan = _Plan.of(policy, workload)
    columns = _Columns()
    for t, d in enumerate(demand):
        arrivals = next(requests, ()) if requests is not None else ()
        ready, capacity, step, obs = _serve(run, workload, plan, t, d, arrivals)
        if plan.has_gpuscale:
            sample_gpus(policy, run, obs, t, plan.memory_total, plan.engines_read)
        _control(policy, run, workload, config, plan, t, d, step.waiting)
        _apply_replicas(run, workload, t)
        columns.add(d, capacity, ready, run, obs, step)
    return columns.timeline(policy.name, run)


def _start(policy: Policy, workload: Workload) -> RunState:
    """The run's state at t=0: the initial pods Ready, each with the cold start any pod of the workload
    has (the API lists them with their history), KEDA active unless the ScaledObject is new."""
    initial = workload.initial_replicas if policy.initial_replicas is None else policy.initial_replicas
    pods = tuple(Pod(i, -1, 0, 0) for i in range(initial))
    cold_starts = ColdStarts()
    started = -float(workload.provisioning_seconds + workload.load_seconds)
    learn_cold_starts(cold_starts, WORKLOAD, [PodStart(p.name, started, 0.0) for p in pods])
    n = len(policy.sources)
    run = RunState(
        pods,
        initial,
        initial,
        HpaState(),
        KedaState(0 if initial > 0 and not policy.new_scaled_object else None, 0, (0,) * n),
        (None,) * n,
        [],
    )
    run.queue = EngineQueue(workload.max_queue_seconds)
    run.cold_starts = cold_starts
    run.aborts_counted = workload.aborts_counted
    if workload.replica_model == "tokens" and workload.tokens is not None:
        run.tokens = TokenEngines(workload.tokens, workload.max_queue_seconds)
    return run


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a run does each second, decided once from its policy."""

    engines_read: bool  # the agents read the engines
    reads_path: bool  # a trigger reads the request path
    has_push: bool  # a trigger is pushed (external-push)
    has_gpuscale: bool  # a trigger is gpuscale's: the agents sample
    memory_total: int  # bytes of each GPU

    @staticmethod
    def of(policy: Policy, workload: Workload) -> _Plan:
        so = policy.scaled_object
        return _Plan(
            engines_read=reads_engines(policy),
            reads_path=any(
                s.trigger is not None and s.trigger.metadata is not None and s.trigger.metadata.request_path
                for s in policy.sources
            ),
            has_push=so is not None and any(s.trigger is not None and s.trigger.push for s in policy.sources),
            has_gpuscale=any(s.via == "gpuscale" for s in policy.sources),
            memory_total=int(workload.gpu_memory_gib * 2**30),
        )


def _serve(
    run: RunState, workload: Workload, plan: _Plan, t: int, d: float, arrivals: Sequence[Request]
) -> tuple[int, float, Served, Observation]:
    """Second ``t``: the Ready pods serve the demand ``d`` through the engines' queue (or the token model's
    engines, ``arrivals`` its requests), the request path counts it, and the true state is recorded. Returns
    the Ready pods, their capacity, the queue's step and the observation."""
    ready = sum(1 for p in run.pods if t >= p.ready_at)
    capacity = ready * workload.capacity_per_replica
    if run.tokens is not None:
        sec = run.tokens.second(t, arrivals, [p.name for p in run.pods if t >= p.ready_at])
        run.token_seconds.append(sec)
        step, obs = token_observation(run.pods, d, workload, t, sec)
    else:
        step = run.queue.step(t, d, capacity)
        obs = observe(run.pods, d, workload, t, step)
    if plan.reads_path:
        run.arrived += d
        run.path.append(PathReading(float(t), run.arrived, step.waiting if ready == 0 else 0.0))
        if len(run.path) > 2 * PATH_KEPT:
            del run.path[:PATH_KEPT]
    if run.history and _same(run.history[-1], obs):
        obs = replace(obs, ready=run.history[-1].ready, loading=run.history[-1].loading)
    run.history.append(obs)
    return ready, capacity, step, obs


def _control(
    policy: Policy,
    run: RunState,
    workload: Workload,
    config: ControllerConfig,
    plan: _Plan,
    t: int,
    d: float,
    waiting: float,
) -> None:
    """The controllers at ``t``: the oracle's ask, or KEDA's poll (and a push); then the HPA's sync, which
    the oracle's ask replaces the metrics of. Sets ``run.replicas``."""
    so = policy.scaled_object
    ask: int | None = None
    if policy.oracle is not None:
        ask = oracle_replicas(policy.oracle, d, waiting, workload)
        run.metric = d / workload.capacity_per_replica
        if policy.oracle.controller == "direct":
            run.replicas = ask
    elif so is not None:
        if t >= policy.keda_offset_seconds and (t - policy.keda_offset_seconds) % so.polling_interval == 0:
            _keda_poll(policy, so, run, t, push_only=False)
        elif plan.has_push and t % policy.gpuscale.sampling_interval == 0:
            _keda_poll(policy, so, run, t, push_only=True)
    sync = config.sync_period_seconds
    if (
        (policy.oracle is None or policy.oracle.controller == "hpa")
        and t >= policy.hpa_offset_seconds
        and (t - policy.hpa_offset_seconds) % sync == 0
    ):
        infos = _pod_infos(run.pods, t)
        target = ScaleTarget(run.replicas, len(run.pods), infos)
        disabled = run.replicas == 0 and policy.hpa.min_replicas != 0  # no metrics are read
        n = len(policy.sources)
        readings = (None,) * n if disabled or ask is not None else _readings(policy, run, t, infos)
        result = reconcile(policy.hpa, config, run.hpa_state, target, readings, t, proposed=ask)
        run.hpa_state = result.state
        if result.rescale:
            run.replicas = result.desired


def _apply_replicas(run: RunState, workload: Workload, t: int) -> None:
    """Pods created or deleted at once to the replica count; a deleted pod holds its GPU
    ``terminationSeconds`` longer."""
    if run.replicas != len(run.pods):
        before = run.pods
        run.pods, run.next_id = scale_pods(run.pods, run.replicas, t, workload, run.next_id)
        if workload.termination_seconds:
            kept = {p.id for p in run.pods}
            gone = tuple((p, t + workload.termination_seconds) for p in before if p.id not in kept)
            run.terminating += gone
    if run.terminating:
        run.terminating = tuple((p, end) for p, end in run.terminating if end > t)


class _Columns:
    """The timeline's columns, one value per second."""

    def __init__(self) -> None:
        self.cols: tuple[list[float], ...] = tuple([] for _ in range(12))

    def add(
        self, d: float, capacity: float, ready: int, run: RunState, obs: Observation, step: Served
    ) -> None:
        values = (
            d,
            capacity,
            run.replicas,
            ready,
            len(run.pods) + len(run.terminating),
            run.metric,
            obs.util if capacity > 0 else math.nan,
            step.served,
            step.abandoned,
            step.waiting,
            obs.kv_cache,
            obs.ttft,
        )
        for col, value in zip(self.cols, values, strict=True):
            col.append(float(value))

    def timeline(self, name: str, run: RunState) -> Timeline:
        cols = self.cols
        engines = run.tokens
        return Timeline(
            policy=name,
            demand=tuple(cols[0]),
            capacity=tuple(cols[1]),
            desired=tuple(int(v) for v in cols[2]),
            ready=tuple(int(v) for v in cols[3]),
            pods=tuple(int(v) for v in cols[4]),
            metric=tuple(cols[5]),
            utilization=tuple(cols[6]),
            served=tuple(cols[7]),
            unserved=tuple(cols[8]),
            waiting=tuple(cols[9]),
            kv_cache=tuple(cols[10]),
            ttft=tuple(cols[11]),
            delays=tuple(sorted((engines or run.queue).delays.items())),
            waiting_at_end=(engines or run.queue).waiting,
            tokens=TokenTimeline.of(run.token_seconds, engines) if engines is not None else None,
        )


def _same(a: Observation, b: Observation) -> bool:
    return a.ready == b.ready and a.loading == b.loading
