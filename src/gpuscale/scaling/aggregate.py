"""The scaling arithmetic: per-GPU smoothing, aggregation over GPUs, and the value KEDA is given. Pure; the
current time is an argument (``now``, Unix seconds), never read.

1. **Extract** one number per sample (``extractor``); ``None`` (the GPU does not report it) never counts.
2. **Smooth** per GPU (``smooth``): samples older than ``staleAfter`` never count; of the rest, the mean
   of those at most ``window`` seconds old; when none is that young, the newest one (so ``window: 0``, or a
   window shorter than the sampling interval, means "the newest fresh sample"). Samples from the future
   (clock skew) count as age 0. The mean is unweighted: the agent samples at a fixed interval.
3. **Aggregate** over GPUs (``aggregate``): ``max``, ``min``, ``avg``, ``sum``, or ``pNN``, the percentile by
   linear interpolation between closest ranks (numpy's default ``linear`` method): sorted ``x``,
   rank ``h = (n - 1) * q / 100``, result ``x[floor h] + (h - floor h) * (x[ceil h] - x[floor h])``.
4. **Value** (``evaluate``): workload scope reports ``aggregate * pods`` (the workload's pods with usable
   samples), so KEDA's default ``AverageValue`` gives the HPA ``ceil(pods * aggregate / target)``; node and
   pool scope report the aggregate. Active means ``aggregate > activationValue`` (per replica in workload
   scope).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model import GpuSample, ProcessSample
from .errors import NoDataError
from .metadata import TriggerMetadata
from .profiles import Aggregation, Metric, Share
from .ring import COLUMNS, SampleRing

if TYPE_CHECKING:
    from .decisions import Decision

__all__ = [
    "Evaluation",
    "Extract",
    "GpuSeries",
    "GpuValue",
    "Smoothed",
    "aggregate",
    "evaluate",
    "extractor",
    "gpu_values",
    "percentile",
    "smooth",
]

Extract = Callable[[GpuSample], "float | None"]

# Metrics read straight off a sample field (a C-level getter: this is the inner loop of every call), and
# those derived from two fields.
_PLAIN_FIELDS: dict[Metric, str] = {
    "gpu_utilization": "gpu_utilization",
    "memory_utilization": "memory_utilization",
    "memory_used": "memory_used_bytes",
    "temperature": "temperature_celsius",
    "power": "power_watts",
    "gr_engine_active": "gr_engine_active",
    "sm_active": "sm_active",
    "sm_occupancy": "sm_occupancy",
    "tensor_active": "tensor_active",
    "dram_active": "dram_active",
}
_DERIVED: dict[Metric, Extract] = {
    "memory_used_percent": lambda s: s.memory_used_percent,
    "power_percent": lambda s: s.power_percent,
}
_WHOLE: dict[Metric, Extract] = {
    **{m: operator.attrgetter(f) for m, f in _PLAIN_FIELDS.items()},
    **_DERIVED,
}
_INF = math.inf
# The same metrics as columns of a ``SampleRing``, for the fast path of ``smooth``.
_RING_COLUMN: dict[Extract, int] = {_WHOLE[m]: COLUMNS[_PLAIN_FIELDS.get(m, m)] for m in _WHOLE}


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """Recent samples of one GPU, oldest first. In workload scope ``pod`` names the workload's pod the GPU is
    attributed to (``namespace/name``), ``pids`` its processes on it (``None``: every process) and
    ``attributed`` the processes on it whose container the agent could tell, any pod's (``None``: all)."""

    uuid: str
    samples: Sequence[GpuSample]
    pod: str | None = None
    pids: frozenset[int] | None = None
    attributed: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class Smoothed:
    """One GPU's smoothed value, how many samples went into it, and the age of the newest."""

    value: float
    samples: int
    newest_age: float


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What the service answers and logs: ``value`` for GetMetrics, ``active`` for IsActive, and how they
    came about (``gpus`` aggregated, ``pods`` counted, ``skipped`` GPUs without usable samples)."""

    value: float
    aggregate: float
    active: bool
    gpus: int
    pods: int
    skipped: int
    newest_sample_age: float
    fresh_pods: frozenset[str] = frozenset()  # workload scope: the pods with a usable sample
    missing: int = 0  # workload scope: GPU pods without one (``answer``'s missing-pod rule)
    missing_where: tuple[str, ...] = ()  # their nodes and why: "node-3 (agent gone: 2 pods)"
    loading: int = 0  # workload scope: GPU pods still starting (not Ready): coming capacity, not idle
    # which of ``answer``'s decisions (``decisions.Decision``) changed the value, if any, and its figures
    # for people ("120 s" for the forecast one cold start ahead)
    decision: Decision | None = None
    detail: str = ""
    present: float | None = None  # the newest readings' value (window 0), when the answer would scale down

    @property
    def decided(self) -> str:
        """How the answer was decided, in words: "" (the value as measured), "N-1 guard", "ahead 120 s",
        "request path 31.0 req/s", "uncapped by the engines' demand (x1.80)"."""
        if self.decision is None:
            return ""
        return f"{self.decision.value} {self.detail}" if self.detail else self.decision.value


def extractor(
    metric: Metric,
    share: Share = "gpu",
    pids: Collection[int] | None = None,
    attributed: Collection[int] | None = None,
) -> Extract:
    """The function reading ``metric`` from a sample. ``share="container"``: the figures of the processes in
    ``pids`` (all when ``None``): summed SM utilization (capped at 100), memory used, or memory used as a
    percentage of the GPU's. Processes none of which reports the figure count as unknown. None of ``pids``
    on the GPU counts as 0 only when every process on it is accounted for (in ``attributed``, any pod's; all
    when ``None``): while the agent cannot tell whose a process is, it may be this pod's, and the share is
    unknown, never a made-up 0 (as the agent's ``DCGM_CUSTOM_*`` series)."""
    if share == "gpu":
        return _WHOLE[metric]
    if metric not in ("gpu_utilization", "memory_used", "memory_used_percent"):
        raise ValueError(f'share "container" does not apply to metric "{metric}"')

    def mine(sample: GpuSample) -> float | None:
        procs = [p for p in sample.processes if pids is None or p.pid in pids]
        if not procs and attributed is not None and any(p.pid not in attributed for p in sample.processes):
            return None
        total = _process_sum(procs, metric)
        if total is None or metric == "memory_used":
            return total
        if metric == "gpu_utilization":
            return min(total, 100.0)
        if not sample.memory_total_bytes:
            return None
        return 100.0 * total / sample.memory_total_bytes

    return mine


def _process_sum(procs: Sequence[ProcessSample], metric: Metric) -> float | None:
    if not procs:
        return 0.0
    if metric == "gpu_utilization":
        figures = [p.sm_utilization for p in procs if p.sm_utilization is not None]
    else:
        figures = [float(p.used_memory_bytes) for p in procs if p.used_memory_bytes is not None]
    return float(sum(figures)) if figures else None


def smooth(
    samples: Sequence[GpuSample], extract: Extract, *, now: float, window: float, stale_after: float
) -> Smoothed | None:
    """One GPU's value (see the module doc), or ``None`` when no fresh sample reports the metric.

    ``samples`` are oldest first (as the agents send them and the state keeps them): the walk goes from the
    newest back and stops at the first sample too old to count, so its cost is the window's samples, not
    the whole history. A ``SampleRing`` read for a whole-GPU metric is walked in its columns."""
    if type(samples) is SampleRing and extract in _RING_COLUMN:
        found = _walk(samples.newest_first(_RING_COLUMN[extract]), now, window, stale_after)
    else:
        found = _walk(((s.timestamp, extract(s)) for s in reversed(samples)), now, window, stale_after)
    return None if found is None else Smoothed(*found)


def _walk(
    newest_first: Iterable[tuple[float, float | None]], now: float, window: float, stale_after: float
) -> tuple[float, int, float] | None:
    """``smooth`` over (timestamp, value) pairs, newest first: (value, samples counted, age of the newest)."""
    recent: list[float] = []
    newest_age = -1.0
    for timestamp, value in newest_first:
        age = now - timestamp
        if age < 0.0:
            age = 0.0
        if age > stale_after or (age > window and recent):
            break
        if value is None or not -_INF < value < _INF:  # absent, NaN or infinite: does not count
            continue
        if newest_age < 0.0:
            newest_age = age
        if age <= window:
            recent.append(value)
        else:  # nothing within the window: the newest fresh sample stands alone
            return float(value), 1, age
    if not recent:
        return None
    return math.fsum(recent) / len(recent), len(recent), newest_age


def _any_fresh(samples: Sequence[GpuSample], now: float, stale_after: float) -> bool:
    if type(samples) is SampleRing:
        return samples.any_fresh(now, stale_after)
    return any(now - x.timestamp <= stale_after for x in samples)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0-100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def aggregate(values: Sequence[float], how: Aggregation) -> float:
    """Aggregate per-GPU values; ``values`` must not be empty."""
    if not values:
        raise ValueError("aggregate of no values")
    if how == "max":
        return max(values)
    if how == "min":
        return min(values)
    if how == "sum":
        return math.fsum(values)
    if how == "avg":
        return math.fsum(values) / len(values)
    return percentile(values, float(how[1:]))


def evaluate(metadata: TriggerMetadata, series: Iterable[GpuSeries], *, now: float) -> Evaluation:
    """Smooth, aggregate and scale per ``metadata``. Each GPU counts once (share ``gpu``: by uuid; share
    ``container``: by uuid and pod). Raise ``NoDataError`` when no GPU has a usable sample."""
    workload = metadata.scope == "workload"
    values: list[float] = []
    pods: set[str] = set()
    seen: set[object] = set()
    by_uuid: dict[str, tuple[float, int, float] | None] = {}
    stale = unsupported = 0
    newest = math.inf
    per_pod = metadata.share == "container"
    whole = None if per_pod else extractor(metadata.metric)
    column = None if whole is None else _RING_COLUMN.get(whole)
    window, stale_after = metadata.window, metadata.stale_after
    for s in series:  # the hot loop of every call: kept flat
        uuid, pod, samples = s.uuid, s.pod, s.samples
        if pod is None and workload:
            raise ValueError(f"GPU {uuid}: workload scope needs the pod each GPU is attributed to")
        key = (uuid, pod) if per_pod else uuid
        if key in seen:  # a GPU shared by several of the workload's pods: one value, every pod counts
            if pod is not None and not per_pod and by_uuid.get(uuid) is not None:
                pods.add(pod)
            continue
        seen.add(key)
        found: tuple[float, int, float] | None
        if column is not None and type(samples) is SampleRing:
            found = _walk(samples.newest_first(column), now, window, stale_after)
        else:
            extract = whole or extractor(metadata.metric, metadata.share, s.pids, s.attributed)
            result = smooth(samples, extract, now=now, window=window, stale_after=stale_after)
            found = None if result is None else (result.value, result.samples, result.newest_age)
        by_uuid[uuid] = found
        if found is None:
            if _any_fresh(samples, now, stale_after):
                unsupported += 1
            else:
                stale += 1
            continue
        values.append(found[0])
        if found[2] < newest:
            newest = found[2]
        if pod is not None:
            pods.add(pod)
    if not values:
        raise NoDataError(
            metadata.metric,
            gpus=stale + unsupported,
            stale=stale,
            unsupported=unsupported,
            stale_after=metadata.stale_after,
        )
    agg = aggregate(values, metadata.aggregation)
    value = agg * len(pods) if workload else agg
    return Evaluation(
        value=value,
        aggregate=agg,
        active=agg > metadata.activation_value,
        gpus=len(values),
        pods=len(pods) if workload else 0,
        skipped=stale + unsupported,
        newest_sample_age=newest,
        fresh_pods=frozenset(pods),
    )


@dataclass(frozen=True, slots=True)
class GpuValue:
    """One GPU's part in an evaluation, for people (``query --explain``): ``smoothed`` as ``evaluate``
    counts it, or ``None`` and why it is left out: ``stale`` (no sample newer than ``staleAfter``) or
    ``unsupported`` (its fresh samples do not report the metric); ``newest_age``: its newest sample's age
    (``None``: no sample)."""

    uuid: str
    pod: str | None
    smoothed: Smoothed | None
    left_out: str | None
    newest_age: float | None


def gpu_values(metadata: TriggerMetadata, series: Iterable[GpuSeries], *, now: float) -> list[GpuValue]:
    """Each GPU of ``series`` smoothed as ``evaluate`` smooths it (the same extractor and walk), or why it
    is left out."""
    out: list[GpuValue] = []
    for s in series:
        extract = extractor(metadata.metric, metadata.share, s.pids, s.attributed)
        smoothed = smooth(
            s.samples, extract, now=now, window=metadata.window, stale_after=metadata.stale_after
        )
        newest = now - s.samples[-1].timestamp if len(s.samples) else None
        left_out = None
        if smoothed is None:
            left_out = "unsupported" if _any_fresh(s.samples, now, metadata.stale_after) else "stale"
        out.append(GpuValue(s.uuid, s.pod, smoothed, left_out, newest))
    return out
