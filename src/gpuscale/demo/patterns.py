"""The demand patterns of ``gpuscale demo``: requests per second as a function of time, and the phase name.

Pure. Each shape is laid out relative to the run's duration, so a short and a long demo tell the same story.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["PATTERNS", "DemandPattern", "make_pattern"]

PATTERNS = ("burst", "ramp", "sine", "spike", "wake")


@dataclass(frozen=True)
class DemandPattern:
    """``name`` one of ``PATTERNS``; ``peak`` and ``base`` in requests/s; ``duration`` in seconds."""

    name: str
    duration: float
    base: float
    peak: float

    @property
    def idles(self) -> bool:
        """Whether the pattern drops to no demand at all (then the workload may scale to zero)."""
        return self.name in ("spike", "wake")

    def at(self, t: float) -> tuple[float, str]:
        """The demand (requests/s) and the phase at ``t`` seconds."""
        x = t / self.duration if self.duration > 0 else 1.0
        if self.name == "burst":
            if x < 0.2:
                return self.base, "low"
            if x < 0.55:
                return self.peak, "burst"
            return self.base, "after the burst"
        if self.name == "ramp":
            if x < 0.1:
                return self.base, "low"
            if x < 0.45:
                return self.base + (self.peak - self.base) * (x - 0.1) / 0.35, "ramping up"
            if x < 0.75:
                return self.peak - (self.peak - self.base) * (x - 0.45) / 0.3, "ramping down"
            return self.base, "low"
        if self.name == "sine":
            mid, amp = (self.peak + self.base) / 2, (self.peak - self.base) / 2
            phase = 2 * math.pi * x - math.pi / 2  # one period: trough, peak at half time, trough
            value = mid + amp * math.sin(phase)
            return value, "rising" if math.cos(phase) > 0 else "falling"
        if self.name == "spike":
            if x < 0.35:
                return 0.0, "idle"
            if x < 0.7:
                return self.peak, "spike"
            return self.base, "after the spike"
        if self.name == "wake":  # the burst after an idle start: the workload wakes from zero into it
            if x < 0.1:
                return 0.0, "idle"
            if x < 0.45:
                return self.peak, "burst"
            return self.base, "after the burst"
        raise AssertionError(self.name)


def make_pattern(name: str, duration: float, capacity_per_replica: float) -> DemandPattern:
    """The named pattern sized for the demo's 6 GPUs: a low base of 0.8 replicas' worth, a peak of 4.2."""
    if name not in PATTERNS:
        raise UsageError(f'--pattern "{name}" must be one of [{", ".join(PATTERNS)}]')
    return DemandPattern(name, duration, 0.8 * capacity_per_replica, 4.2 * capacity_per_replica)
