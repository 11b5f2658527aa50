"""Builders shared by the agreement tests (``test_scaler_and_simulator_agree*.py``): one workload state, and
the simulator's answer over it (the scaler's: ``_agree_scaler``).

A state is a few pods, each with its GPU's samples and its engine's readings over the last two minutes
(``Load``), whether it is Ready, when it was scheduled and became Ready, when it was deleted; the nodes whose
agent's stream ended; the replicas the Kubernetes API counts.

The simulator side is what ``sim.loop`` holds of those pods at ``NOW``: the GPU samples of the pods not
deleted, the engine readings of the Ready ones, the deleted pods' readings it keeps by
``view.departed_kept``, the pods darkened (their node's agent gone), those loading, the cold start learned
with ``view.learn_cold_starts``, the capacity learned with ``capacity.saturated_rate``; answered by its
builders (``sim.scaler``: ``gpuscale_reading`` over ``gpuscale_series`` and ``engine_series``), as
``sim.scaler.trigger_value`` calls them in a run.

Both sides name the pods ``sim/<name>`` (the scaler's namespace is ``sim``), so a difference in an answer is
a difference in how each side builds its ``WorkloadView``, never in names.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpuscale.model import BucketCounts, EngineSample, GpuSample, ModelSignals
from gpuscale.scaling.capacity import Capacities, saturated_rate
from gpuscale.scaling.coldstart import ColdStarts
from gpuscale.scaling.keys import ENGINE_METRICS
from gpuscale.scaling.metadata import parse_metadata
from gpuscale.scaling.view import PodStart, departed_kept, learn_cold_starts
from gpuscale.sim import parse_scenario
from gpuscale.sim._keda_manifest import SIM_METRICS
from gpuscale.sim.keda import TriggerSpec
from gpuscale.sim.scaler import engine_series, gpuscale_reading, gpuscale_series

NOW = 1_000_000.5
NS = "sim"  # the scaler's namespace: the simulator names its pods sim/<name>
SELECTOR = "app=llm"
GIB = 2**30
HISTORY_S = 119.5  # the oldest sample's age: the scaler holds 120 s (--history)
TTFT_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, math.inf)
ITL_BOUNDS = (0.01, 0.02, 0.05, 0.1, math.inf)
Answer = tuple[float | None, bool]


# ----- a state -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    """A pod's engine and GPU over the last two minutes, at ``age`` seconds before ``NOW``: requests arrive
    at ``rate - rise * age`` per second and finish at that rate (the finished counter is its integral),
    ``waiting - waiting_rise * age`` wait (``burst``: as many at the newest reading), ``running`` run, the KV
    cache fills ``kv`` % plus 4 % a waiting request; 40 generated tokens a request; TTFT and ITL histograms
    grow with the finished requests (``slow``: the slower buckets). ``util``: GPU utilization, ``burst_util``
    at the newest sample. ``models``: served models, the load split between them. ``restart``: the engine
    restarted this many seconds ago (its counters and histograms started over). ``queue_time``: it exposes
    vLLM's queue-time ``_sum``/``_count`` (the wait Little's law gives)."""

    rate: float = 2.0
    rise: float = 0.0
    waiting: float = 1.0
    waiting_rise: float = 0.0
    burst: float | None = None
    running: float = 2.0
    kv: float = 40.0
    slow: bool = False
    util: float = 70.0
    burst_util: float | None = None
    models: tuple[str, ...] = ("m",)
    restart: float | None = None
    queue_time: bool = False


@dataclass(frozen=True)
class Pod:
    """One GPU pod of the workload (``app=llm``) on ``node``. Ages are seconds before ``NOW``: ``newest``
    is its newest GPU sample's and engine reading's (older than ``staleAfter``: a pod with no fresh one);
    ``scheduled``/``became_ready``: its PodScheduled and Ready transitions (``None``: not known);
    ``deleted``: when it was deleted (its samples and readings stop a second before). ``ready``: its Ready
    condition (``False``: loading its model, its engine refusing connections). ``sampled``: whether its GPU
    has a sample yet (``False``: just scheduled)."""

    name: str
    node: str = "node-1"
    load: Load = Load()
    ready: bool = True
    newest: float = 0.5
    scheduled: float | None = None
    became_ready: float | None = None
    deleted: float | None = None
    sampled: bool = True


@dataclass(frozen=True)
class State:
    """Pods; ``gone``: ``(node, age)`` of agents whose stream ended that long ago; ``pending``: pods not on a
    node yet (no agent reports them, the Kubernetes API counts them); ``api``: the scaler reads the
    workload's pods and replicas from the API (the simulator always knows its replicas: ``sim.loop`` passes
    every pod not deleted), else it has the agents' word alone and the simulator is given no replica count;
    ``nodes``: nodes whose agents stream besides those of the pods."""

    pods: tuple[Pod, ...]
    gone: tuple[tuple[str, float], ...] = ()
    pending: int = 0
    api: bool = True
    nodes: tuple[str, ...] = ("node-1",)

    @property
    def replicas(self) -> int | None:
        """The target's pods, as the API counts them (``None``: no API)."""
        if not self.api:
            return None
        return sum(p.deleted is None for p in self.pods) + self.pending

    def gone_at(self, node: str) -> float | None:
        return next((NOW - age for n, age in self.gone if n == node), None)


def _ages(newest: float, step: float) -> list[float]:
    """Ages from the oldest held down to ``newest``, ``step`` apart (oldest first)."""
    n = int((HISTORY_S - newest) // step)
    return [newest + step * k for k in range(n, -1, -1)]


def _newest(p: Pod) -> float:
    return max(p.newest, p.deleted + 1.0) if p.deleted is not None else p.newest


@functools.cache
def gpu_samples(p: Pod) -> tuple[GpuSample, ...]:
    """``p``'s GPU samples, one a second, oldest first: a loading pod's GPU idles as its memory fills."""
    if not p.sampled:
        return ()
    out = []
    newest = _newest(p)
    for age in _ages(newest, 1.0):
        u = p.load.util if p.ready else 0.0
        if age == newest and p.load.burst_util is not None:
            u = p.load.burst_util
        used = (20 + 0.5 * u if p.ready else 8 + 50 * (1 - age / HISTORY_S)) * GIB
        out.append(
            GpuSample(
                uuid(p),
                NOW - age,
                gpu_utilization=u,
                memory_utilization=0.6 * u,
                memory_used_bytes=int(used),
                memory_total_bytes=80 * GIB,
                temperature_celsius=35 + 0.4 * u,
                power_watts=90 + 5 * u,
                power_limit_watts=700.0,
                gr_engine_active=0.95 * u,
                sm_active=0.9 * u,
                sm_occupancy=0.5 * u,
                tensor_active=0.4 * u,
                dram_active=0.55 * u,
            )
        )
    return tuple(out)


def _histogram(bounds: tuple[float, ...], shares: tuple[float, ...], n: float) -> BucketCounts:
    return BucketCounts(bounds, tuple(s * n for s in shares))


@functools.cache
def engine_readings(p: Pod) -> tuple[EngineSample, ...]:
    """``p``'s engine readings, one every two seconds, oldest first (none while it loads)."""
    if not p.ready or not p.sampled:
        return ()
    ld = p.load
    h = HISTORY_S + 0.5

    def finished(age: float) -> float:  # 1000 before the history, then the integral of the rate
        return 1000.0 + ld.rate * (h - age) - ld.rise * (h * h - age * age) / 2

    ttft = (0.05, 0.2, 0.5, 0.8, 0.95, 1.0) if ld.slow else (0.3, 0.7, 0.9, 0.97, 0.99, 1.0)
    itl = (0.2, 0.6, 0.9, 0.97, 1.0) if ld.slow else (0.5, 0.85, 0.97, 0.99, 1.0)
    newest = _newest(p)
    out = []
    for age in _ages(newest, 2.0):
        done = finished(age)
        if ld.restart is not None and age < ld.restart:
            done -= finished(ld.restart) - 5.0  # started over: five requests since
        waiting = max(0.0, ld.waiting - ld.waiting_rise * age)
        if age == newest and ld.burst is not None:
            waiting = ld.burst
        running = ld.running if ld.rate > 0 or waiting > 0 else 0.0
        n = len(ld.models)
        models = []
        for i, name in enumerate(ld.models):
            share = done / n
            wait_s = ld.waiting / ld.rate if ld.queue_time and ld.rate > 0 else None
            models.append(
                ModelSignals(
                    name,
                    waiting=waiting / n,
                    running=running / n,
                    kv_cache_usage=min(95.0, ld.kv + 4 * waiting) * (1.0 - 0.25 * i),
                    ttft=_histogram(TTFT_BOUNDS, ttft, share),
                    itl=_histogram(ITL_BOUNDS, itl, 40 * share),
                    prompt_tokens=300 * share,
                    generation_tokens=40 * share,
                    requests_finished=share,
                    queue_time_sum=share * wait_s if wait_s is not None else None,
                    queue_time_count=share if wait_s is not None else None,
                )
            )
        out.append(EngineSample(NOW - age, "vllm", tuple(sorted(models, key=lambda m: m.model))))
    return tuple(out)


def uuid(p: Pod) -> str:
    return f"GPU-sim-{p.name}"


# ----- the simulator side ------------------------------------------------------------------------------------
@functools.cache
def _trigger(items: tuple[tuple[str, str], ...]) -> TriggerSpec:
    metadata = dict(items)
    md = parse_metadata(metadata)
    if md.metric not in SIM_METRICS:
        # the scenario parser refuses metrics the simulated workload does not produce; its trigger is then
        # the one it would build (_keda_manifest._gpuscale_trigger), from the same parser
        target, activation = md.target_value, md.activation_value
        return TriggerSpec("agree", "external", "AverageValue", target, activation, "-", metadata=md)
    fields = ", ".join(f'{k}: "{v}"' for k, v in {"scalerAddress": "s:1", **metadata}.items())
    scenario = parse_scenario(
        f"""
name: agree
durationSeconds: 10
workload: {{capacityPerReplica: 10}}
demand: {{shape: constant, value: 1}}
policies:
  - name: g
    scaledObject:
      apiVersion: keda.sh/v1alpha1
      kind: ScaledObject
      spec:
        scaleTargetRef: {{name: llm}}
        triggers: [{{type: external, metadata: {{{fields}}}}}]
"""
    )
    (trigger,) = scenario.policies[0].scaled_object.triggers  # type: ignore[union-attr]
    return trigger


def trigger(metadata: Mapping[str, str]) -> TriggerSpec:
    """The simulator's trigger for ``metadata``: its scenario parser's, where it models the metric."""
    return _trigger(tuple(sorted(metadata.items())))


def simulator_answer(metadata: Mapping[str, str], state: State, *, keep_departed: bool = True) -> Answer:
    """What the simulator answers at ``NOW`` holding ``state`` as ``sim.loop`` holds a run's pods: a deleted
    pod's readings kept while ``view.departed_kept`` (``keep_departed=False``: dropped at once, to show what
    they change)."""
    trig = trigger(metadata)
    assert trig.metadata is not None
    alive = [p for p in state.pods if p.deleted is None]
    history = {p.name: list(gpu_samples(p)) for p in alive if p.sampled}
    engines = {p.name: list(engine_readings(p)) for p in alive if engine_readings(p)}
    departed = {
        p.name: list(r)
        for p in state.pods
        if keep_departed and p.deleted is not None and (r := engine_readings(p)) and departed_kept(r, NOW)
    }
    gone = {n for n, _ in state.gone}
    dark = {p.name for p in alive if p.node in gone}
    loading = {p.name for p in alive if not p.ready}
    # the cold starts the scaler learned from its pods, each as it became Ready
    starts = [
        PodStart(p.name, NOW - p.scheduled, NOW - p.became_ready)
        for p in state.pods
        if p.scheduled is not None and p.became_ready is not None and p.ready
    ]
    cold_start = learn_cold_starts(ColdStarts(), "sim", starts)
    series = gpuscale_series(history, NOW)
    held = engine_series(engines, series, NOW, departed)
    capacity = None
    md = trig.metadata
    if md.metric in ENGINE_METRICS and held:  # as sim.scaler.trigger_value learns it
        learned = Capacities()
        ready = frozenset(f"sim/{p.name}" for p in alive if p.ready)
        rate = saturated_rate(md, held, ready, NOW)
        if rate is not None:
            learned.observe("sim", NOW, rate)
        capacity = learned.rate("sim")
    return gpuscale_reading(
        trig,
        series,
        NOW,
        held,
        dark,
        loading=loading,
        replicas=state.replicas,
        cold_start=cold_start,
        capacity=capacity,
    )
