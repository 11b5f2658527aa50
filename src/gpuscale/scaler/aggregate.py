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
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from ..model import GpuSample, ProcessSample
from .errors import NoDataError
from .metadata import TriggerMetadata
from .profiles import Aggregation, Metric, Share

__all__ = [
    "Evaluation",
    "Extract",
    "GpuSeries",
    "Smoothed",
    "aggregate",
    "evaluate",
    "extractor",
    "percentile",
    "smooth",
]

Extract = Callable[[GpuSample], "float | None"]

_GPU_FIELDS: dict[Metric, Callable[[GpuSample], float | int | None]] = {
    "gpu_utilization": lambda s: s.gpu_utilization,
    "memory_utilization": lambda s: s.memory_utilization,
    "memory_used": lambda s: s.memory_used_bytes,
    "memory_used_percent": lambda s: s.memory_used_percent,
    "temperature": lambda s: s.temperature_celsius,
    "power": lambda s: s.power_watts,
    "power_percent": lambda s: s.power_percent,
}


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """Recent samples of one GPU, oldest first. In workload scope ``pod`` names the workload's pod the GPU is
    attributed to (``namespace/name``) and ``pids`` its processes on it (``None``: every process)."""

    uuid: str
    samples: Sequence[GpuSample]
    pod: str | None = None
    pids: frozenset[int] | None = None


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


def extractor(metric: Metric, share: Share = "gpu", pids: Collection[int] | None = None) -> Extract:
    """The function reading ``metric`` from a sample. ``share="container"``: the figures of the processes in
    ``pids`` (all when ``None``): summed SM utilization (capped at 100), memory used, or memory used as a
    percentage of the GPU's. No process at all counts as 0; processes none of which reports the figure, as
    unknown."""
    if share == "gpu":
        field = _GPU_FIELDS[metric]

        def whole(sample: GpuSample) -> float | None:
            value = field(sample)
            return None if value is None else float(value)

        return whole
    if metric not in ("gpu_utilization", "memory_used", "memory_used_percent"):
        raise ValueError(f'share "container" does not apply to metric "{metric}"')

    def mine(sample: GpuSample) -> float | None:
        procs = [p for p in sample.processes if pids is None or p.pid in pids]
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
    the whole history."""
    recent: list[float] = []
    newest_age: float | None = None
    for sample in reversed(samples):
        age = max(0.0, now - sample.timestamp)
        if age > stale_after:
            break
        if age > window and recent:
            break
        value = extract(sample)
        if value is None or not math.isfinite(value):
            continue
        if newest_age is None:
            newest_age = age
        if age <= window:
            recent.append(value)
        else:  # nothing within the window: the newest fresh sample stands alone
            return Smoothed(value, 1, age)
    if newest_age is None:
        return None
    return Smoothed(math.fsum(recent) / len(recent), len(recent), newest_age)


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
    seen: set[tuple[str, str | None]] = set()
    by_uuid: dict[str, Smoothed | None] = {}
    stale = unsupported = 0
    newest = math.inf
    for s in series:
        if workload and s.pod is None:
            raise ValueError(f"GPU {s.uuid}: workload scope needs the pod each GPU is attributed to")
        per_pod = metadata.share == "container"
        key = (s.uuid, s.pod if per_pod else None)
        if key in seen:  # a GPU shared by several of the workload's pods: one value, every pod counts
            if by_uuid.get(s.uuid) is not None and s.pod is not None and not per_pod:
                pods.add(s.pod)
            continue
        seen.add(key)
        extract = extractor(metadata.metric, metadata.share, s.pids)
        result = smooth(s.samples, extract, now=now, window=metadata.window, stale_after=metadata.stale_after)
        by_uuid[s.uuid] = result
        if result is None:
            if any(max(0.0, now - x.timestamp) <= metadata.stale_after for x in s.samples):
                unsupported += 1
            else:
                stale += 1
            continue
        values.append(result.value)
        newest = min(newest, result.newest_age)
        if s.pod is not None:
            pods.add(s.pod)
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
    )
