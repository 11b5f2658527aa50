"""What the agents sample and the scaler holds in a simulated run, and how a gpuscale trigger is answered
there: the GPU series and engine readings of the workload's pods (kept by the scaler's own rules,
``scaling.view``), the request path's readings, the learned cold start and capacity, all put in one
``WorkloadView`` and answered by ``scaling.answer``, the scaler's own code."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import overload

from ..model import EngineSample, GpuSample, ModelSignals
from ..scaling.aggregate import GpuSeries
from ..scaling.answer import answer
from ..scaling.capacity import saturated_rate
from ..scaling.engine import EngineSeries, PodValueMemo
from ..scaling.errors import MissingPods, NoDataError, RequestPathMissing, UnattributedPods
from ..scaling.keys import ENGINE_METRICS
from ..scaling.requestpath import RequestPath
from ..scaling.view import LOOKBACK_MAX_S, GpuPod, PodStart, WorkloadView, departed_kept, learn_cold_starts
from .keda import TriggerSpec
from .pipeline import evaluate_scalar
from .policy import MetricSource, Policy
from .run import RunState, fault, sampled
from .workload import Observation

__all__ = [
    "LOADING_ENGINE",
    "PATH_KEPT",
    "WORKLOAD",
    "engine_series",
    "gpuscale_reading",
    "gpuscale_series",
    "horizon",
    "reads_engines",
    "sample_gpus",
    "trigger_value",
]


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
    agents and the API report readiness; in the view whether sampled yet or not); ``replicas``: the
    target's pods (Pending too); ``cold_start``: the workload's, as the scaler learned it."""
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
        seen.update(p.name for p in pods)
        # a pod the agents report Running, not Ready, before its GPU's first sample: loading, as in the scaler
        pods += [GpuPod(name, "sim", ready=False) for name in sorted(starting - seen)]
        view = WorkloadView(series, pods, engines, replicas, cold_start, capacity, request_path)
        result = answer(trig.metadata, view, now)
    except (NoDataError, UnattributedPods, MissingPods, RequestPathMissing):
        return None, False
    return result.value, result.active


def trigger_value(policy: Policy, src: MetricSource, run: RunState, t: int) -> tuple[float | None, bool]:
    """(value reported to KEDA/HPA, whether the trigger is active); a value of None is an error."""
    trig = src.trigger
    if fault(policy, "trigger-error", t) is not None:
        return None, False
    if src.via == "prometheus":
        value = evaluate_scalar(src.signal, sampled(run, policy.prometheus.sample_times(t)))
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
        path = RequestPath(run.path[max(0, n - PATH_KEPT) : n], source="the simulated gateway")
    capacity: float | None = None
    if md.metric in ENGINE_METRICS and engines and seen is not None:
        ready = frozenset(f"sim/{name}" for name in seen.ready)
        rate = saturated_rate(md, engines, ready, now) if run.capacities.due(WORKLOAD, now) else None
        if rate is not None:
            run.capacities.observe(WORKLOAD, now, rate)
        capacity = run.capacities.rate(WORKLOAD)
    return gpuscale_reading(
        trig,
        series,
        now,
        engines,
        run.dark & running,
        loading=seen.loading if seen is not None else (),
        replicas=len(run.pods),
        cold_start=run.cold_starts.seconds(WORKLOAD),
        request_path=path,
        capacity=capacity,
    )


# the request path's readings an answer is given: the last 30 s (its rate looks back 5 s)
PATH_KEPT = 30


def sample_gpus(
    policy: Policy, run: RunState, obs: Observation, t: int, memory_total: int, engines: bool
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
    keep = horizon(policy)
    for name, gone in list(run.departed.items()):
        if not departed_kept(gone, t):  # by the scaler's rule
            del run.departed[name]
    # the scaler sees a pod become Ready (agents and the API report readiness)
    starts = [PodStart(p.name, float(p.created), float(p.ready_at)) for p in run.pods if p.ready_at == t]
    learn_cold_starts(run.cold_starts, WORKLOAD, starts)
    if engines:
        _count_requests(run, obs, run.aborts_counted)
    if t % policy.gpuscale.sampling_interval:
        return
    values = obs.samples()
    dark: set[str] = set()
    dark_fault = fault(policy, "samples-missing", t)
    if dark_fault is not None:
        running = sorted((p for p in run.pods if p.name in values), key=lambda p: p.id)
        dark = {p.name for p in running[: dark_fault.pods]}
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
WORKLOAD = "sim"


def _count_requests(run: RunState, obs: Observation, counted: bool) -> None:
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


def reads_engines(policy: Policy) -> bool:
    """Whether the agents read the engines for the policy: a trigger of it is a gpuscale engine metric, or
    its pipeline says so (``readEngines``: the pods announce their engines' /metrics) for a GPU trigger."""
    metrics = {s.trigger.metadata.metric for s in policy.sources if s.trigger and s.trigger.metadata}
    return bool(metrics & ENGINE_METRICS) or (bool(metrics) and policy.gpuscale.read_engines)


def horizon(policy: Policy) -> int:
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
