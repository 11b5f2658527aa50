"""``SampleRing``: the recent samples of one GPU, kept in columns.

The cluster scaler holds 120 s of samples for every GPU of the cluster (960,000 samples for 8,000 GPUs).
Kept as one ``GpuSample`` object per sample (plus a float object per field), that history costs about
500 MiB, scatters each GPU's window over the heap (a call's cost is mostly cache misses) and gives the
garbage collector a million objects to walk (pauses of several hundred milliseconds). Here each GPU has one
``array('d')`` per field it reports, written in a circle: about 11 KiB per GPU at 120 s, the window of a GPU
in a few cache lines, and no per-sample object except the (usually empty) tuple of processes.

A ring is still a ``Sequence[GpuSample]`` (oldest first): reading it that way builds the samples on demand,
which is what the slow paths (per-container shares, tests, inspection) use. The fast path is
``newest_first``: one field's (timestamp, value) pairs from the newest sample back, which
``aggregate.smooth`` walks exactly as it walks samples. An absent field is NaN in its column and never
counts, as ``None`` never counts in a sample.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

from ..model import SAMPLE_FIELDS, GpuSample, ProcessSample

__all__ = ["COLUMNS", "SampleRing"]

# Every column: the sample fields, then two derived at append (as ``GpuSample``'s properties derive them).
COLUMNS: dict[str, int] = {
    **{name: i for i, name in enumerate(SAMPLE_FIELDS)},
    "memory_used_percent": len(SAMPLE_FIELDS),
    "power_percent": len(SAMPLE_FIELDS) + 1,
}
_USED, _TOTAL = COLUMNS["memory_used_bytes"], COLUMNS["memory_total_bytes"]
_POWER, _LIMIT = COLUMNS["power_watts"], COLUMNS["power_limit_watts"]
_NAN = math.nan
_INF = math.inf
# The fields every GPU reports come first; from _SPARSE on, fields most GPUs never report (GPM activity:
# Hopper and newer). Their columns start as one shared all-NaN array per capacity and get an array of their
# own at the first value: 8,000 GPUs without GPM do not carry 5 empty columns each (40 MiB at 120 s).
_SPARSE = SAMPLE_FIELDS.index("gr_engine_active")
_NAN_COLUMNS: dict[int, array[float]] = {}
_WHOLE = frozenset({"memory_used_bytes", "memory_total_bytes"})  # int fields of GpuSample


def _nan_column(capacity: int) -> array[float]:
    """The shared, never written, all-NaN column of this length."""
    col = _NAN_COLUMNS.get(capacity)
    if col is None:
        col = _NAN_COLUMNS[capacity] = array("d", [_NAN]) * capacity
    return col


class SampleRing(Sequence[GpuSample]):
    """The newest ``capacity`` samples of GPU ``uuid``; older ones are overwritten."""

    __slots__ = ("_cols", "_end", "_procs", "_size", "_sparse", "_ts", "capacity", "uuid")

    def __init__(self, uuid: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.uuid = uuid
        self.capacity = capacity
        self._ts = array("d", bytes(8 * capacity))
        nan = _nan_column(capacity)
        self._cols = [
            nan if _SPARSE <= k < len(SAMPLE_FIELDS) else array("d", bytes(8 * capacity))
            for k in range(len(COLUMNS))
        ]
        self._procs: list[tuple[ProcessSample, ...]] = [()] * capacity
        self._sparse = False  # whether any sparse column has an array of its own
        self._end = 0  # where the next sample goes
        self._size = 0

    # -- writing ---------------------------------------------------------------------------------------
    def append(
        self, timestamp: float, values: Sequence[float], processes: tuple[ProcessSample, ...] = ()
    ) -> None:
        """Add a sample: ``values`` in ``model.SAMPLE_FIELDS`` order, NaN where the GPU did not report it; the
        sparse fields at the end may be left out (all NaN)."""
        i = self._end
        cols = self._cols
        self._ts[i] = timestamp
        for k in range(_SPARSE):
            cols[k][i] = values[k]
        if len(values) > _SPARSE:
            shared = _NAN_COLUMNS[self.capacity]
            for k in range(_SPARSE, len(values)):
                v, col = values[k], cols[k]
                if col is shared:  # stays shared while the GPU reports nothing
                    if v != v:
                        continue
                    col = cols[k] = array("d", col)
                    self._sparse = True
                col[i] = v
        elif self._sparse:  # none this time: clear this slot of the columns that have values
            shared = _NAN_COLUMNS[self.capacity]
            for k in range(_SPARSE, len(SAMPLE_FIELDS)):
                if cols[k] is not shared:
                    cols[k][i] = _NAN
        used, total = values[_USED], values[_TOTAL]
        cols[-2][i] = 100.0 * used / total if total > 0.0 else _NAN  # NaN stays NaN
        power, limit = values[_POWER], values[_LIMIT]
        cols[-1][i] = 100.0 * power / limit if limit > 0.0 else _NAN
        self._procs[i] = processes
        self._end = i + 1 if i + 1 < self.capacity else 0
        if self._size < self.capacity:
            self._size += 1

    def append_sample(self, sample: GpuSample) -> None:
        values = [getattr(sample, name) for name in SAMPLE_FIELDS]
        self.append(sample.timestamp, [_NAN if v is None else float(v) for v in values], sample.processes)

    # -- the fast path ---------------------------------------------------------------------------------
    def newest_first(self, column: int) -> Iterator[tuple[float, float]]:
        """(timestamp, value) of one column, newest sample first: what ``aggregate.smooth`` walks. The
        arrays are sliced in C; the walk stops at the first sample too old to count."""
        end, size, ts, col = self._end, self._size, self._ts, self._cols[column]
        if size < self.capacity:  # not yet wrapped: the samples are [0, end)
            return zip(reversed(ts[:end]), reversed(col[:end]), strict=True)
        return zip(
            itertools.chain(reversed(ts[:end]), reversed(ts[end:])),
            itertools.chain(reversed(col[:end]), reversed(col[end:])),
            strict=True,
        )

    def any_fresh(self, now: float, stale_after: float) -> bool:
        """Whether any sample is at most ``stale_after`` seconds old."""
        ts = self._ts
        return any(now - ts[self._slot(k)] <= stale_after for k in range(self._size))

    # -- Sequence[GpuSample], oldest first ---------------------------------------------------------------
    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> GpuSample: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[GpuSample]: ...

    def __getitem__(self, index: int | slice) -> GpuSample | Sequence[GpuSample]:
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("SampleRing index out of range")
        return self._sample(self._slot(index))

    def __iter__(self) -> Iterator[GpuSample]:
        for k in range(self._size):
            yield self._sample(self._slot(k))

    def __reversed__(self) -> Iterator[GpuSample]:
        for k in range(self._size - 1, -1, -1):
            yield self._sample(self._slot(k))

    def _slot(self, k: int) -> int:
        """The array index of the ``k``-th oldest sample."""
        return (self._end - self._size + k) % self.capacity

    def _sample(self, i: int) -> GpuSample:
        values: dict[str, Any] = {}
        for k, name in enumerate(SAMPLE_FIELDS):
            v = self._cols[k][i]
            values[name] = None if v != v else int(v) if name in _WHOLE else v
        return GpuSample(uuid=self.uuid, timestamp=self._ts[i], processes=self._procs[i], **values)
