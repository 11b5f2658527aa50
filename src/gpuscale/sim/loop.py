"""The discrete-time loop: one-second steps of workload, metric pipeline, KEDA operator and HPA.

Pure and deterministic: ``simulate(policy, workload, demand, config, duration)`` returns a ``Timeline``.
Each second ``t``: pods advance (Pending -> Running -> Ready), the Ready pods serve the second's demand
through the engines' queue (``workload.EngineQueue``), the true state is recorded, the agents sample the
Running pods' GPUs, then KEDA polls (every ``pollingInterval``, plus every sample for ``external-push``
triggers), then the HPA syncs (every sync period), each reading the metric through its pipeline; replica
changes create or delete pods at once (a deleted pod holds its GPU ``terminationSeconds`` longer). The
capacity and Ready pods recorded for ``t`` are those that served it, before that second's decisions.

A gpuscale trigger is answered by the scaler's own code (``gpuscale.scaling.answer``) over the samples the
scaler would hold: one GPU per Running pod, sampled every ``samplingIntervalSeconds``, visible
``delaySeconds`` late, read half a second after the tick (a KEDA poll falls between two samples). A
``samples-missing`` fault stops some pods' samples; they age past ``staleAfter`` as they would in the
scaler.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, overload

from ..model import EngineSample, GpuSample, ModelSignals
from ..scaling.aggregate import GpuSeries
from ..scaling.answer import LOOKBACK_MAX_S, GpuPod, answer
from ..scaling.capacity import Capacities, saturated_rate
from ..scaling.coldstart import ColdStarts
from ..scaling.engine import EngineSeries, PodValueMemo
from ..scaling.errors import MissingPods, NoDataError, RequestPathMissing, UnattributedPods
from ..scaling.keys import ENGINE_METRICS
from ..scaling.requestpath import PathReading, RequestPath
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
from .workload import EngineQueue, Observation, Pod, Workload, observe, scale_pods

__all__ = ["MetricSource", "Oracle", "Policy", "Timeline", "oracle_replicas", "simulate"]


@dataclass(frozen=True)
class MetricSource:
    """Where one HPA metric comes from. ``trigger`` is set for ScaledObject policies."""

    signal: Signal
    via: Literal["gpuscale", "prometheus"]
    trigger: TriggerSpec | None = None


@dataclass(frozen=True)
class Oracle:
    """The ``oracle`` policy: it knows the demand (and the queue) at every instant and asks for exactly the
    replicas they need (``oracle_replicas``): no metric, no pipeline, no KEDA. ``controller``:

    * ``hpa`` (the default): the ask is the HPA's proposal at each of its syncs, in place of the metrics'
      (so no tolerance: it is exact), and the HPA's own limits apply as to every KEDA policy (the legacy
      path: ``max(2c, 4)`` per sync up, the 300 s stabilization window down). Only the cold start and the
      HPA stand between demand and capacity: the limit of any policy the HPA decides.
    * ``direct``: it writes ``/scale`` itself every second: no sync period, tolerance, stabilization window
      or rate limit; only its bounds and the pods' start phases. The limit of reacting at once.

    ``drain_queue``: also ask for the capacity that starts the waiting requests before they time out."""

    min_replicas: int = 1
    max_replicas: int = 100
    drain_queue: bool = True
    controller: Literal["hpa", "direct"] = "hpa"


def oracle_replicas(oracle: Oracle, demand: float, waiting: float, workload: Workload) -> int:
    """``ceil((demand + waiting / maxQueueSeconds) / capacityPerReplica)`` within the oracle's bounds: the
    replicas the present demand needs, plus (``drain_queue``, with a queue) those that start the requests
    waiting now within ``maxQueueSeconds``. Without them a queue at exactly the demand's capacity never
    drains: every request would wait as long as the backlog is."""
    if oracle.drain_queue and workload.max_queue_seconds > 0:
        demand += waiting / workload.max_queue_seconds
    need = math.ceil(demand / workload.capacity_per_replica - 1e-9) if demand > 0 else 0
    return max(oracle.min_replicas, min(oracle.max_replicas, need))


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
    oracle: Oracle | None = None  # set: the oracle policy (``hpa`` carries its bounds, no metric)


@dataclass(frozen=True)
class Timeline:
    """One entry per simulated second. ``metric`` is the first metric's value as last fetched (NaN before).

    ``capacity`` and ``ready`` are what served the second; ``served`` and ``unserved`` the requests started
    and abandoned in it, ``waiting`` those still queued at its end; ``kv_cache`` and ``ttft`` each Ready
    pod's (NaN with none). ``delays``: (seconds waited, requests) over the run, an abandoned request counted
    at ``max_queue_seconds``; ``waiting_at_end``: requests still queued when the run ends (unserved)."""

    policy: str
    demand: tuple[float, ...]
    capacity: tuple[float, ...]
    desired: tuple[int, ...]
    ready: tuple[int, ...]
    pods: tuple[int, ...]
    metric: tuple[float, ...]
    utilization: tuple[float, ...]
    served: tuple[float, ...]
    unserved: tuple[float, ...]
    waiting: tuple[float, ...]
    kv_cache: tuple[float, ...]
    ttft: tuple[float, ...]
    delays: tuple[tuple[int, float], ...]
    waiting_at_end: float


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
    # Running pods a samples-missing fault darkens: the scaler knows them (from the API, or their agent's last
    # report), so they are missing pods even when they never sent a sample
    dark: frozenset[str] = frozenset()
    # and of each Ready pod's engine: its readings, oldest first (gpuscale engine triggers only)
    engines: dict[str, list[EngineSample]] = field(default_factory=dict)
    # and of pods deleted within the forecast's look-back: their readings until they went
    departed: dict[str, list[EngineSample]] = field(default_factory=dict)
    # each pod's engine values already computed for the forecast (scaling.engine.pod_value_at)
    engine_memos: dict[str, PodValueMemo] = field(default_factory=dict)
    # pods deleted and still holding their GPUs: (pod, the second it is gone)
    terminating: tuple[tuple[Pod, int], ...] = ()
    queue: EngineQueue = field(default_factory=lambda: EngineQueue(0))
    # each Ready pod's engine counters: (requests finished so far, requests in flight at its last reading,
    # of the finished those aborted: abandoned in the queue; the seconds the requests it started had waited,
    # and how many: vLLM's queue-time histogram's _sum and _count)
    counters: dict[str, tuple[float, float, float, float, float]] = field(default_factory=dict)
    # the workload's cold start as the scaler learns it from its pods (scheduled to Ready)
    cold_starts: ColdStarts = field(default_factory=ColdStarts)
    aborts_counted: bool = False  # workload.aborts_counted: the engines count an abandoned request
    # what the request path in front of the workload counts each second: the requests arrived so far, and
    # those it holds (waiting with no Ready pod to take them)
    path: list[PathReading] = field(default_factory=list)
    arrived: float = 0.0
    # a replica's capacity as the scaler learns it while requests wait (request_rate triggers)
    capacities: Capacities = field(default_factory=Capacities)


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


# What the scaler holds of a loading pod's engine: its agent's scrape is refused (vLLM serves /metrics once
# its engine is up).
LOADING_ENGINE = "engine not read: connect_error (the engine is loading: connection refused)"


def engine_series(
    engines: dict[str, list[EngineSample]],
    gpu: Sequence[GpuSeries],
    visible_until: float,
    departed: dict[str, list[EngineSample]] | None = None,
    memos: dict[str, PodValueMemo] | None = None,
) -> list[EngineSeries]:
    """The engine series the scaler holds: each Ready pod's readings taken at or before ``visible_until``;
    a pod with GPU samples and no reading (loading) is one whose engine could not be read. ``memos`` keeps
    each pod's computed values from one call to the next (pods no longer held are dropped from it)."""
    if memos is not None:
        for name in [n for n in memos if n not in engines and n not in (departed or {})]:
            del memos[name]

    def memo(name: str) -> PodValueMemo | None:
        return memos.setdefault(name, {}) if memos is not None else None

    out: list[EngineSeries] = []
    for name, history in engines.items():
        n = bisect.bisect_right(history, visible_until, key=lambda x: x.timestamp)
        if n:
            out.append(EngineSeries(f"sim/{name}", history[:n], memo=memo(name)))
    read = {e.pod for e in out}
    out.extend(EngineSeries(s.pod, (), LOADING_ENGINE) for s in gpu if s.pod and s.pod not in read)
    for name, history in (departed or {}).items():
        n = bisect.bisect_right(history, visible_until, key=lambda x: x.timestamp)
        if n:
            out.append(EngineSeries(f"sim/{name}", history[:n], departed=True, memo=memo(name)))
    return out


def gpuscale_reading(
    trig: TriggerSpec,
    series: Sequence[GpuSeries],
    now: float,
    engines: Sequence[EngineSeries] = (),
    dark: Iterable[str] = (),
    *,
    loading: Iterable[str] = (),
    replicas: int | None = None,
    cold_start: float | None = None,
    request_path: RequestPath | None = None,
    capacity: float | None = None,
) -> tuple[float | None, bool]:
    """(value for GetMetrics, IsActive) of a gpuscale trigger, as the scaler answers them; ``None``: the
    scaler answers ``UNAVAILABLE``. Every series is one of the workload's Running pods, each asking for a
    GPU; ``engines``: their engines, for an engine metric; ``loading``: the Running pods not Ready yet (the
    agents and the API report readiness); ``replicas``: the target's pods (Pending too); ``cold_start``: the
    workload's, as the scaler learned it."""
    assert trig.metadata is not None
    starting = {f"sim/{name}" for name in loading}
    try:
        pods = [GpuPod(s.pod or s.uuid, "sim", ready=(s.pod or s.uuid) not in starting) for s in series]
        seen = {p.name for p in pods}
        pods += [
            GpuPod(f"sim/{name}", "sim", connected=False, ready=f"sim/{name}" not in starting)
            for name in sorted(dark)
            if f"sim/{name}" not in seen
        ]
        result = answer(
            trig.metadata,
            series,
            now=now,
            gpu_pods=pods,
            engines=engines,
            replicas=replicas,
            cold_start=cold_start,
            request_path=request_path,
            capacity=capacity,
        )
    except (NoDataError, UnattributedPods, MissingPods, RequestPathMissing):
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
    assert trig is not None and trig.metadata is not None
    visible = t - policy.gpuscale.delay_seconds
    series = gpuscale_series(run.samples, visible)
    engines = (
        engine_series(run.engines, series, visible, run.departed, run.engine_memos)
        if trig.metadata.metric in ENGINE_METRICS or policy.gpuscale.read_engines
        else ()
    )
    running = set(run.history[-1].ready) | set(run.history[-1].loading) if run.history else set()
    seen = run.history[max(0, min(len(run.history) - 1, int(visible)))] if run.history else None
    md = trig.metadata
    now = t + _READ_OFFSET
    path: RequestPath | None = None
    if md.request_path is not None:
        until = t - policy.gpuscale.request_path_delay
        n = bisect.bisect_right(run.path, float(until), key=lambda r: r.timestamp)
        path = RequestPath(run.path[max(0, n - _PATH_KEPT) : n], source="the simulated gateway")
    capacity: float | None = None
    if md.metric in ENGINE_METRICS and engines and seen is not None:
        ready = frozenset(f"sim/{name}" for name in seen.ready)
        rate = saturated_rate(md, engines, ready, now) if run.capacities.due(_WORKLOAD, now) else None
        if rate is not None:
            run.capacities.observe(_WORKLOAD, now, rate)
        capacity = run.capacities.rate(_WORKLOAD)
    return gpuscale_reading(
        trig,
        series,
        now,
        engines,
        run.dark & running,
        loading=seen.loading if seen is not None else (),
        replicas=len(run.pods),
        cold_start=run.cold_starts.seconds(_WORKLOAD),
        request_path=path,
        capacity=capacity,
    )


# the request path's readings an answer is given: the last 30 s (its rate looks back 5 s)
_PATH_KEPT = 30


def _sample_gpus(
    policy: Policy, run: _Run, obs: Observation, t: int, memory_total: int, engines: bool
) -> None:
    """The agents' sampling round at ``t``: a sample of each Running pod's GPU (utilization: Ready ``util``,
    loading 0; memory used: filling while loading, the engine's once Ready; of ``memory_total`` bytes) and,
    with ``engines``, a reading of each Ready pod's engine (its share of the waiting and running requests,
    its KV-cache fill), except the pods a ``samples-missing`` fault darkens; deleted pods are forgotten."""
    names = {p.name for p in run.pods}
    for name in [n for n in run.samples if n not in names]:
        del run.samples[name]
    for name in [n for n in run.engines if n not in names]:
        run.departed[name] = run.engines.pop(name)  # the scaler keeps them for the forecast's look-back
    keep = _horizon(policy)
    kept_s = keep * policy.gpuscale.sampling_interval
    for name, gone in list(run.departed.items()):
        if not gone or gone[-1].timestamp < t - kept_s:
            del run.departed[name]
    for p in run.pods:
        if p.ready_at == t:  # the scaler sees it become Ready (agents and the API report readiness)
            run.cold_starts.observe(_WORKLOAD, p.name, float(p.created), float(p.ready_at))
    if engines:
        _count_requests(run, obs, run.aborts_counted)
    if t % policy.gpuscale.sampling_interval:
        return
    values = obs.samples()
    dark: set[str] = set()
    fault = _fault(policy, "samples-missing", t)
    if fault is not None:
        running = sorted((p for p in run.pods if p.name in values), key=lambda p: p.id)
        dark = {p.name for p in running[: fault.pods]}
    run.dark = frozenset(dark)
    memory = obs.memory()
    for name, util in values.items():
        if name in dark:
            continue
        history = run.samples.setdefault(name, [])
        used = int(memory_total * memory[name] / 100)
        history.append(
            GpuSample(
                _UUID_PREFIX + name,
                float(t),
                gpu_utilization=util,
                memory_used_bytes=used,
                memory_total_bytes=memory_total,
            )
        )
        if len(history) > 2 * keep and history[0].timestamp < t - keep:
            del history[: len(history) - keep]
    if not engines:
        return
    ready = [name for name in obs.ready if name not in dark]
    n = len(obs.ready)
    for name in ready:
        signals = ModelSignals(
            "sim",
            waiting=obs.waiting / n,
            running=obs.running / n,
            kv_cache_usage=obs.kv_cache,
            requests_finished=run.counters[name][0],
            requests_aborted=run.counters[name][2],
            queue_time_sum=run.counters[name][3],
            queue_time_count=run.counters[name][4],
        )
        reading = EngineSample(float(t), "vllm", (signals,))
        readings = run.engines.setdefault(name, [])
        readings.append(reading)
        if len(readings) > 2 * keep and readings[0].timestamp < t - keep:
            del readings[: len(readings) - keep]


# The one workload a run scales, as the scaler's cold-start learner names it.
_WORKLOAD = "sim"


def _count_requests(run: _Run, obs: Observation, counted: bool) -> None:
    """Each Ready pod's finished-requests counter, advanced by one second: the router splits the arrivals
    between the Ready pods, and what a pod did not keep in flight it finished, so its arrivals are its
    finished requests plus the growth of its waiting and running ones, as on a real engine. A request
    abandoned in the queue leaves it uncounted (``workload.aborts_counted`` False: released vLLM counts no
    client abort, so the arrivals read low while the queue sheds), or is finished with reason ``abort`` and
    counted as aborted too (True). A pod's first second
    Ready is its baseline. When a pod leaves, the simulator's one queue moves its share to the others; their
    counters never go back (no counter does), so that second their arrivals read high: an error only on
    scale-down, and on the side that keeps replicas."""
    ready = obs.ready
    if not ready:
        run.counters.clear()
        return
    n = len(ready)
    share = (obs.waiting + obs.running) / n
    arrivals = obs.demand / n
    abandoned = obs.abandoned / n
    started, waited = obs.served / n, obs.waited / n
    counters: dict[str, tuple[float, float, float, float, float]] = {}
    for name in ready:
        before = run.counters.get(name)
        if before is None:
            counters[name] = (0.0, share, 0.0, 0.0, 0.0)
            continue
        finished, in_flight, aborted, q_sum, q_count = before
        done = max(0.0, arrivals - (share - in_flight))
        shed = min(done, abandoned)
        q_sum, q_count = q_sum + waited, q_count + started
        if counted:
            counters[name] = (finished + done, share, aborted + shed, q_sum, q_count)
        else:
            counters[name] = (finished + done - shed, share, aborted, q_sum, q_count)
    run.counters = counters


def _reads_engines(policy: Policy) -> bool:
    """Whether the agents read the engines for the policy: a trigger of it is a gpuscale engine metric, or
    its pipeline says so (``readEngines``: the pods announce their engines' /metrics) for a GPU trigger."""
    metrics = {s.trigger.metadata.metric for s in policy.sources if s.trigger and s.trigger.metadata}
    return bool(metrics & ENGINE_METRICS) or (bool(metrics) and policy.gpuscale.read_engines)


def _horizon(policy: Policy) -> int:
    """How many samples per pod any of the policy's gpuscale triggers can still count."""
    longest = max(
        (s.trigger.metadata.stale_after for s in policy.sources if s.trigger and s.trigger.metadata),
        default=0.0,
    )
    ahead = any(
        s.trigger.metadata.scale_ahead != "off" for s in policy.sources if s.trigger and s.trigger.metadata
    )
    if ahead:  # the forecast looks back over the cold start, at most LOOKBACK_MAX_S, each point a window
        longest += LOOKBACK_MAX_S
    return int(longest + policy.gpuscale.delay_seconds) // policy.gpuscale.sampling_interval + 2


def _readings(policy: Policy, run: _Run, t: int, pods: tuple[PodInfo, ...]) -> tuple[MetricReading, ...]:
    out: list[MetricReading] = []
    so = policy.scaled_object
    ready = sum(1 for p in pods if p.ready)
    for i, (metric, src) in enumerate(zip(policy.hpa.metrics, policy.sources, strict=True)):
        if metric.source == "Pods":
            obs = _sampled(run, policy.prometheus.sample_times(t))
            names = {p.name for p in pods}
            per_pod = per_pod_values(obs, src.signal.field)
            values = {k: keda_milli(v) for k, v in per_pod.items() if k in names}
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
    cold_starts = ColdStarts()
    for p in pods:  # the API lists them with their history: each started as any pod of the workload does
        cold_starts.observe(
            _WORKLOAD, p.name, -float(workload.provisioning_seconds + workload.load_seconds), 0.0
        )
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
    run.queue = EngineQueue(workload.max_queue_seconds)
    run.cold_starts = cold_starts
    run.aborts_counted = workload.aborts_counted
    memory_total = int(workload.gpu_memory_gib * 2**30)
    reads_engines = _reads_engines(policy)
    reads_path = any(
        s.trigger is not None and s.trigger.metadata is not None and s.trigger.metadata.request_path
        for s in policy.sources
    )
    has_push = so is not None and any(s.trigger is not None and s.trigger.push for s in policy.sources)
    has_gpuscale = any(s.via == "gpuscale" for s in policy.sources)
    cols: tuple[list[float], ...] = tuple([] for _ in range(12))
    sync = config.sync_period_seconds
    for t, d in enumerate(demand):
        ready = sum(1 for p in run.pods if t >= p.ready_at)
        capacity = ready * workload.capacity_per_replica
        step = run.queue.step(t, d, capacity)
        if reads_path:
            run.arrived += d
            run.path.append(PathReading(float(t), run.arrived, step.waiting if ready == 0 else 0.0))
            if len(run.path) > 2 * _PATH_KEPT:
                del run.path[:_PATH_KEPT]
        obs = observe(run.pods, d, workload, t, step)
        if run.history and _same(run.history[-1], obs):
            obs = replace(obs, ready=run.history[-1].ready, loading=run.history[-1].loading)
        run.history.append(obs)
        if has_gpuscale:
            _sample_gpus(policy, run, obs, t, memory_total, reads_engines)
        ask: int | None = None
        if policy.oracle is not None:
            ask = oracle_replicas(policy.oracle, d, step.waiting, workload)
            run.metric = d / workload.capacity_per_replica
            if policy.oracle.controller == "direct":
                run.replicas = ask
        elif so is not None:
            if (
                t >= policy.keda_offset_seconds
                and (t - policy.keda_offset_seconds) % so.polling_interval == 0
            ):
                _keda_poll(policy, so, run, t, push_only=False)
            elif has_push and t % policy.gpuscale.sampling_interval == 0:
                _keda_poll(policy, so, run, t, push_only=True)
        if (
            (policy.oracle is None or policy.oracle.controller == "hpa")
            and t >= policy.hpa_offset_seconds
            and (t - policy.hpa_offset_seconds) % sync == 0
        ):
            infos = _pod_infos(run.pods, t)
            target = ScaleTarget(run.replicas, len(run.pods), infos)
            disabled = run.replicas == 0 and policy.hpa.min_replicas != 0  # no metrics are read
            readings = (None,) * n if disabled or ask is not None else _readings(policy, run, t, infos)
            result = reconcile(policy.hpa, config, run.hpa_state, target, readings, t, proposed=ask)
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
        for col, value in zip(
            cols,
            (
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
        served=tuple(cols[7]),
        unserved=tuple(cols[8]),
        waiting=tuple(cols[9]),
        kv_cache=tuple(cols[10]),
        ttft=tuple(cols[11]),
        delays=tuple(sorted(run.queue.delays.items())),
        waiting_at_end=run.queue.waiting,
    )


def _same(a: Observation, b: Observation) -> bool:
    return a.ready == b.ready and a.loading == b.loading
