"""Load patterns for the mock backend: utilization (optionally memory) as a function of time.

A pattern is pure: ``at(t)`` for ``t`` seconds since the backend opened. Specs, as ``--mock-pattern`` takes::

    constant:U                exactly U
    step:FROM:TO:AT_S         FROM until AT_S, then TO
    ramp:FROM:TO:OVER_S       linear from FROM to TO over OVER_S, then TO
    sine:MIN:MAX:PERIOD_S     sine between MIN and MAX, starting at the midpoint going up
    square:LOW:HIGH:PERIOD_S  LOW for the first half of each period, HIGH for the second
    walk:MIN:MAX              a seeded random walk between MIN and MAX (one step a second, interpolated)
    trace:PATH.csv            rows of seconds,utilization[,memory_percent], interpolated linearly

Utilizations and memory are percentages (0-100); times are seconds since start.
"""

from __future__ import annotations

import bisect
import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..errors import UnreadableFile, UsageError
from ..files import read_text

__all__ = [
    "PATTERN_SYNTAX",
    "Constant",
    "LoadPoint",
    "Pattern",
    "Ramp",
    "Sine",
    "Square",
    "Step",
    "Trace",
    "Walk",
    "parse_pattern",
    "parse_patterns",
]

PATTERN_SYNTAX = (
    "constant:U, step:FROM:TO:AT_S, ramp:FROM:TO:OVER_S, sine:MIN:MAX:PERIOD_S, "
    "square:LOW:HIGH:PERIOD_S, walk:MIN:MAX, trace:PATH.csv"
)


@dataclass(frozen=True, slots=True)
class LoadPoint:
    utilization: float
    memory_percent: float | None = None


class Pattern(Protocol):
    def at(self, t: float) -> LoadPoint: ...


@dataclass(frozen=True, slots=True)
class Constant:
    value: float

    def at(self, t: float) -> LoadPoint:
        return LoadPoint(self.value)


@dataclass(frozen=True, slots=True)
class Step:
    before: float
    after: float
    at_s: float

    def at(self, t: float) -> LoadPoint:
        return LoadPoint(self.before if t < self.at_s else self.after)


@dataclass(frozen=True, slots=True)
class Ramp:
    start: float
    end: float
    over_s: float

    def at(self, t: float) -> LoadPoint:
        if t <= 0:
            return LoadPoint(self.start)
        if t >= self.over_s:
            return LoadPoint(self.end)
        return LoadPoint(self.start + (self.end - self.start) * t / self.over_s)


@dataclass(frozen=True, slots=True)
class Sine:
    low: float
    high: float
    period_s: float

    def at(self, t: float) -> LoadPoint:
        mid, amp = (self.low + self.high) / 2, (self.high - self.low) / 2
        return LoadPoint(mid + amp * math.sin(2 * math.pi * t / self.period_s))


@dataclass(frozen=True, slots=True)
class Square:
    low: float
    high: float
    period_s: float

    def at(self, t: float) -> LoadPoint:
        phase = (t % self.period_s) / self.period_s
        return LoadPoint(self.low if phase < 0.5 else self.high)


@dataclass(slots=True)
class Walk:
    """A random walk, deterministic for a seed: the value at second k depends only on (seed, k)."""

    low: float
    high: float
    seed: int = 0
    _points: list[float] = field(default_factory=list, repr=False)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._points.append(self.low + (self.high - self.low) * self._rng.random())

    def _point(self, k: int) -> float:
        span = self.high - self.low
        while len(self._points) <= k:
            nxt = self._points[-1] + self._rng.gauss(0.0, span * 0.08)
            # Reflect at the bounds so the walk stays inside without sticking to them.
            if nxt > self.high:
                nxt = 2 * self.high - nxt
            if nxt < self.low:
                nxt = 2 * self.low - nxt
            self._points.append(min(self.high, max(self.low, nxt)))
        return self._points[k]

    def at(self, t: float) -> LoadPoint:
        t = max(0.0, t)
        k = int(t)
        a, b = self._point(k), self._point(k + 1)
        return LoadPoint(a + (b - a) * (t - k))


@dataclass(frozen=True, slots=True)
class Trace:
    """Piecewise-linear between the rows of a CSV; the first row's value before it, the last row's after."""

    times: tuple[float, ...]
    utilization: tuple[float, ...]
    memory_percent: tuple[float, ...] | None = None

    def at(self, t: float) -> LoadPoint:
        i = bisect.bisect_right(self.times, t)
        if i == 0:
            return LoadPoint(self.utilization[0], self.memory_percent[0] if self.memory_percent else None)
        if i >= len(self.times):
            return LoadPoint(self.utilization[-1], self.memory_percent[-1] if self.memory_percent else None)
        t0, t1 = self.times[i - 1], self.times[i]
        f = (t - t0) / (t1 - t0)
        u = self.utilization[i - 1] + (self.utilization[i] - self.utilization[i - 1]) * f
        m = None
        if self.memory_percent is not None:
            m = self.memory_percent[i - 1] + (self.memory_percent[i] - self.memory_percent[i - 1]) * f
        return LoadPoint(u, m)

    @classmethod
    def from_csv(cls, path: Path, spec: str) -> Trace:
        try:
            text = read_text(path, "trace file")
        except UnreadableFile as e:
            raise UsageError(f'mock pattern "{spec}": cannot read trace file {path}: {e.reason}') from e
        times: list[float] = []
        utils: list[float] = []
        mems: list[float] = []
        for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
            if not row or row[0].strip().startswith("#"):
                continue
            try:
                values = [float(c) for c in row]
            except ValueError:
                if lineno == 1 and not times:
                    continue  # a header row
                raise UsageError(
                    f'mock pattern "{spec}": {path} line {lineno}: expected numbers '
                    f"seconds,utilization[,memory_percent], got {','.join(row)!r}"
                ) from None
            if (
                len(values) not in (2, 3)
                or (mems and len(values) != 3)
                or (times and len(values) == 3 and not mems)
            ):
                raise UsageError(
                    f'mock pattern "{spec}": {path} line {lineno}: expected 2 or 3 columns on every row '
                    "(seconds,utilization[,memory_percent])"
                )
            if times and values[0] <= times[-1]:
                raise UsageError(f'mock pattern "{spec}": {path} line {lineno}: seconds must increase')
            for name, v in zip(("utilization", "memory_percent"), values[1:], strict=False):
                _check_percent(spec, name, v)
            times.append(values[0])
            utils.append(values[1])
            if len(values) == 3:
                mems.append(values[2])
        if not times:
            raise UsageError(f'mock pattern "{spec}": {path} has no rows of seconds,utilization')
        return cls(tuple(times), tuple(utils), tuple(mems) if mems else None)


def _check_percent(spec: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 100.0 or math.isnan(value):
        raise UsageError(f'mock pattern "{spec}": {name} {value:g} must be between 0 and 100')


def _numbers(spec: str, kind: str, args: Sequence[str], names: Sequence[str]) -> list[float]:
    if len(args) != len(names):
        raise UsageError(
            f'mock pattern "{spec}" is malformed: {kind} takes {":".join(n.upper() for n in names)} '
            f"({len(names)} values), got {len(args)}; patterns are {PATTERN_SYNTAX}"
        )
    out: list[float] = []
    for name, raw in zip(names, args, strict=True):
        try:
            v = float(raw)
        except ValueError:
            raise UsageError(f'mock pattern "{spec}": {name} "{raw}" is not a number') from None
        if not math.isfinite(v):
            raise UsageError(f'mock pattern "{spec}": {name} "{raw}" must be a finite number')
        if name.endswith("_s"):
            if v <= 0 and name != "at_s":
                raise UsageError(f'mock pattern "{spec}": {name} "{raw}" must be greater than 0')
            if v < 0:
                raise UsageError(f'mock pattern "{spec}": {name} "{raw}" must be 0 or more')
        else:
            _check_percent(spec, name, v)
        out.append(v)
    return out


def parse_pattern(spec: str, *, seed: int = 0) -> Pattern:
    """Parse one pattern spec; ``seed`` feeds ``walk``. Raises ``UsageError`` naming what is wrong."""
    kind, _, rest = spec.strip().partition(":")
    args = rest.split(":") if rest else []
    if kind == "constant":
        (u,) = _numbers(spec, kind, args, ["u"])
        return Constant(u)
    if kind == "step":
        a, b, at_s = _numbers(spec, kind, args, ["from", "to", "at_s"])
        return Step(a, b, at_s)
    if kind == "ramp":
        a, b, over = _numbers(spec, kind, args, ["from", "to", "over_s"])
        return Ramp(a, b, over)
    if kind in ("sine", "square"):
        lo, hi, period = _numbers(
            spec,
            kind,
            args,
            ["min" if kind == "sine" else "low", "max" if kind == "sine" else "high", "period_s"],
        )
        if lo > hi:
            raise UsageError(f'mock pattern "{spec}": the first bound {lo:g} is above the second {hi:g}')
        return Sine(lo, hi, period) if kind == "sine" else Square(lo, hi, period)
    if kind == "walk":
        lo, hi = _numbers(spec, kind, args, ["min", "max"])
        if lo > hi:
            raise UsageError(f'mock pattern "{spec}": min {lo:g} is above max {hi:g}')
        return Walk(lo, hi, seed)
    if kind == "trace":
        if not rest:
            raise UsageError(f'mock pattern "{spec}" is malformed: trace takes a CSV path, trace:PATH.csv')
        return Trace.from_csv(Path(rest), spec)
    raise UsageError(
        f'mock pattern "{spec}" is malformed: unknown kind "{kind}"; patterns are {PATTERN_SYNTAX}'
    )


def parse_patterns(specs: str, *, seed: int = 0) -> tuple[Pattern, ...]:
    """Parse comma-separated specs, one per GPU (the last repeats for the remaining GPUs)."""
    parts = [p for p in specs.split(",")]
    if any(not p.strip() for p in parts):
        raise UsageError(
            f'mock pattern "{specs}" has an empty entry; give one pattern per GPU, separated by commas'
        )
    return tuple(parse_pattern(p, seed=seed * 1000 + i) for i, p in enumerate(parts))
