"""One workload at one instant, as every decision sees it: ``WorkloadView``, and the builders the scaler and
the simulator both call to make it, so the two feed ``answer`` by the same rules.

Why one view: what an answer depends on (the workload's pods and whether each is Ready, their GPUs'
samples, their engines' readings, the pods deleted a moment ago, the learned cold start and capacity, the
replica count, the request path in front) used to be gathered by each caller its own way, and the
simulator could drift from the scaler exactly where the decisions live. Here it is one frozen object, and
each rule of how it is built is written once:

* ``merge_listed_pods``: the pods the agents report, merged with the Kubernetes API's list (a pod the API
  lists Running and no agent reports is missing; readiness is the agent's word, the list's where the agent
  cannot say);
* ``departed_kept``: how long a deleted pod's engine readings stay in the view (the forecast's look-back
  and a margin), by the age of its last reading;
* ``learn_cold_starts``: each pod seen Ready is one cold start, counted once per Ready transition
  (``coldstart.ColdStarts``).

Pure: time is an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ..model import EngineSample
from .aggregate import GpuSeries
from .coldstart import ColdStarts
from .engine import EngineSeries
from .requestpath import RequestPath

__all__ = [
    "DEPARTED_KEEP_S",
    "LOOKBACK_MAX_S",
    "GpuPod",
    "ListedPod",
    "PodStart",
    "WorkloadView",
    "departed_kept",
    "learn_cold_starts",
    "merge_listed_pods",
]

# The forecast looks back over the cold start, at most this far (the scaler's --history, 120 s by default,
# is what it holds).
LOOKBACK_MAX_S = 120.0
# A deleted pod's engine readings are kept while its last one is at most this old: the forecast's look-back
# and a margin of reading intervals (a departed pod counts up to one interval past its last reading).
DEPARTED_KEEP_S = LOOKBACK_MAX_S + 30.0


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
class PodStart:
    """One of the workload's GPU pods that became Ready: ``pod`` (``namespace/name``) was scheduled at
    ``scheduled_at`` and Ready at ``ready_at`` (seconds): one cold start."""

    pod: str
    scheduled_at: float
    ready_at: float


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """What ``answer`` decides on for one trigger at one instant.

    ``series``: the GPU series in the trigger's scope (in workload scope, those of the workload's pods);
    ``pods``: in workload scope, the workload's pods that ask for a GPU, wherever they are known from
    (connected, stale or forgotten nodes; the API's list); ``engines``: each pod's engine readings, and
    those of pods deleted within the forecast's look-back (``departed``); ``replicas``: the target's pod
    count as its ``status.replicas`` has it (Pending pods too), when known: the count the HPA divides by;
    ``cold_start``: the learned cold start, seconds, when known; ``capacity``: requests/s one replica
    serves, as learned, when known; ``request_path``: what is held of the trigger's ``requestPath``
    (``None``: none configured, or not read); ``name`` names the workload in errors."""

    series: Sequence[GpuSeries] = ()
    pods: Sequence[GpuPod] = ()
    engines: Sequence[EngineSeries] = ()
    replicas: int | None = None
    cold_start: float | None = None
    capacity: float | None = None
    request_path: RequestPath | None = None
    name: str = "the workload"

    def loading(self) -> frozenset[str]:
        """The pods still starting (Ready ``False``)."""
        return frozenset(p.name for p in self.pods if p.ready is False)


class ListedPod(Protocol):
    """A pod as the Kubernetes API's last list has it."""

    @property
    def name(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def ready(self) -> bool | None: ...
    @property
    def scheduled_at(self) -> float | None: ...
    @property
    def ready_at(self) -> float | None: ...


def merge_listed_pods(
    known: Sequence[GpuPod], listed: Sequence[ListedPod] | None, follows: Callable[[str], bool]
) -> tuple[GpuPod, ...]:
    """The workload's GPU pods: those the Kubernetes API lists Running (the agents' word where they
    reported them; not reported: missing), and those the agents report that the last list predates.
    Each pod's readiness is its agent's, or the list's where the agent cannot say (it does not know, or
    its node's agent is not connected: the list is then the fresher word). ``follows(node)``: whether a
    connected agent streams that node. Without a list (``None``: none yet, or the API failing): the agents'
    view alone."""
    if listed is None:
        return tuple(known)
    by_name = {p.name: p for p in known}
    names = {p.name for p in listed}
    out: list[GpuPod] = []
    for p in listed:
        reported = by_name.get(p.name)
        if reported is not None:
            if (reported.ready is None or not reported.connected) and p.ready is not None:
                reported = replace(reported, ready=p.ready)
            out.append(reported)
        elif not follows(p.node):  # its node's agent cannot say: missing
            out.append(GpuPod(p.name, p.node, connected=False, reported=False, ready=p.ready))
        # else: a connected agent's live pod watch no longer has it (deleted since the list)
    # a pod a connected agent reports that the list does not have is newer than the list; one only a
    # stale or forgotten node's agent last reported, which the API no longer lists Running, is gone
    out.extend(p for p in known if p.name not in names and p.connected)
    return tuple(out)


def departed_kept(readings: Sequence[EngineSample], now: float) -> bool:
    """Whether a deleted pod's engine readings still belong in the view at ``now``: its last reading is at
    most ``DEPARTED_KEEP_S`` old (older ones no decision can count: the forecast looks back
    ``LOOKBACK_MAX_S`` at most)."""
    return bool(readings) and readings[-1].timestamp >= now - DEPARTED_KEEP_S


def learn_cold_starts(
    cold_starts: ColdStarts, workload: str, started: Iterable[PodStart], listed: Iterable[ListedPod] = ()
) -> float | None:
    """Count each start in ``started`` (pods their agents report Ready) and each pod of the API's ``listed``
    that says when it was scheduled and Ready, once per Ready transition, as ``workload``'s cold starts;
    return what is learned (seconds, ``None`` before the first)."""
    for s in started:
        cold_starts.observe(workload, s.pod, s.scheduled_at, s.ready_at)
    for p in listed:
        if p.scheduled_at is not None and p.ready_at is not None:
            cold_starts.observe(workload, p.name, p.scheduled_at, p.ready_at)
    return cold_starts.seconds(workload)
