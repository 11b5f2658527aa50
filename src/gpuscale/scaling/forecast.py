"""The forecast of ``scaleAhead``: a workload's value one cold start ahead, from its recent trend.

Why: a replica asked for now serves one cold start later (two minutes for an 8B model: scheduling, image
pull, weights, CUDA graphs). Where demand builds over minutes, answering with the demand of then rather than
of now lets the capacity arrive when the demand does.

How, robust by construction (no parameter to tune per workload):

* the points are the workload's value at regular instants over the look-back (``answer`` computes them with
  the same code as the present value);
* **is it a trend?** Kendall's τ (τ-a: concordant minus discordant pairs over all pairs) must be at least
  ``TAU_MIN`` = 0.6. A steady series (ties) has τ near 0; noise around a level, near 0; a steady ramp, 1;
  a step alone at most about 0.5 (``2p(1-p) n/(n-1)`` for a step at a share ``p`` of the ``n`` points: 0.52
  with the 25 points of a look-back), so a burst that gives no warning is answered at its present value,
  not extrapolated;
* **how steep?** Sen's slope, the median of the pairwise slopes: a few outliers do not move it;
* **bounded:** the forecast is ``present + slope * horizon``, never below the present value (a falling
  trend does not remove capacity early: removing it takes no cold start, and the HPA's own scale-down rules
  apply), and it adds at most the larger of the present value and the range the look-back saw (at most a
  doubling, or what has already been seen to change).

Pure: points in, a number out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIN_POINTS", "TAU_MIN", "Forecast", "forecast", "kendall_tau", "sen_slope"]

TAU_MIN = 0.6
MIN_POINTS = 5


@dataclass(frozen=True, slots=True)
class Forecast:
    """``value``: what to answer; ``trend``: whether the trend was used (else ``value`` is the present);
    ``tau`` and ``slope`` (per second) as measured (``slope`` 0 when there are too few points)."""

    value: float
    trend: bool
    tau: float
    slope: float


def kendall_tau(values: Sequence[float]) -> float:
    """τ-a of ``values`` against their order: 1 for a strictly rising series, -1 falling, 0 with no order."""
    n = len(values)
    if n < 2:
        return 0.0
    s = 0
    for i in range(n - 1):
        vi = values[i]
        for vj in values[i + 1 :]:
            s += (vj > vi) - (vj < vi)
    return s / (n * (n - 1) / 2)


def sen_slope(points: Sequence[tuple[float, float]]) -> float:
    """The median of the slopes between every two points ``(t, v)`` at different times."""
    slopes = [
        (vj - vi) / (tj - ti) for i, (ti, vi) in enumerate(points) for tj, vj in points[i + 1 :] if tj != ti
    ]
    return statistics.median(slopes) if slopes else 0.0


def forecast(points: Sequence[tuple[float, float]], present: float, horizon: float) -> Forecast:
    """The value ``horizon`` seconds ahead of ``present``, from ``points`` (oldest first)."""
    if horizon <= 0 or len(points) < MIN_POINTS:
        return Forecast(present, False, 0.0, 0.0)
    values = [v for _, v in points]
    tau = kendall_tau(values)
    if tau < TAU_MIN:
        return Forecast(present, False, tau, sen_slope(points))
    slope = sen_slope(points)
    if slope <= 0:
        return Forecast(present, False, tau, slope)
    room = max(present, max(values) - min(values))
    return Forecast(present + min(slope * horizon, room), True, tau, slope)
