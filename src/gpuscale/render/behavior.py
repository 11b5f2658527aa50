"""The HPA ``behavior`` a rendered ScaledObject carries (``spec.advanced.horizontalPodAutoscalerConfig``), and
the words its comment says about it.

Why: a demand signal (an engine's queue or request rate, a request path) asks for the replicas the demand
needs in one answer. The HPA's default scale-up (``SetDefaults_HorizontalPodAutoscalerBehavior``: the larger
of +4 pods and +100 % per 15 s) turns that one answer into a climb, 1 → 5 → 10 → 20, one step per sync
(``max(2c, 4)``, 1 → 4 → 8, on an HPA without ``behavior``), and each step a cold start of its own after a
wake from zero. An LLM replica takes minutes to start (download, load, compile), so the scale-down keeps
what was started for longer: a burst that comes back within the window finds its replicas.

How: ``scale_up`` ``fast`` writes a ``scaleUp`` whose limit is never below the asked count: no
stabilization, ``selectPolicy: Max`` of +900 % and +``maxReplicaCount`` pods per 15 s (from any count, the
Pods policy alone reaches ``maxReplicaCount``); ``default`` writes none, the HPA's default applies. The
``scaleDown`` is always written (its window, ``SCALE_DOWN_S`` by default, then 1 pod per 60 s). The
scale-up defaults by what the trigger is: ``fast`` for a demand trigger, ``default`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ._bounds import MAX_STABILIZATION_S, check_ints

__all__ = [
    "FAST_PERCENT",
    "SCALE_DOWN_S",
    "SCALE_UP",
    "HpaBehavior",
    "check",
    "choose",
    "default_climb",
]

SCALE_UP = ("default", "fast")
# The HPA's sync period (kube-controller-manager's default): one scale-up step per sync.
SYNC_S = 15
# +900 %: ten times the replicas of the period's start per sync (1 → 10, 2 → 20).
FAST_PERCENT = 900
# The scale-down window, the same for every trigger: 300 s keeps a burst's replicas for the next burst within
# 5 minutes, longer than most cold starts. A longer one (600 s) served no more of the standard set's bursty
# traces (docs/decisions.md: spike-after-idle, bursts-after-idle, flash-crowd, the real azure-conv hour) and
# cost GPU-hours on each; --scale-down-stabilization sets another.
SCALE_DOWN_S = 300
# What the scale-down removes once the window has passed: 1 pod per minute.
_SCALE_DOWN_POLICY = {"type": "Pods", "value": 1, "periodSeconds": 60}


@dataclass(frozen=True, slots=True)
class HpaBehavior:
    """What ``behavior`` says: ``scale_up`` (``fast`` or ``default``), the scale-down window in seconds,
    ``max_replicas`` (``fast``'s Pods policy) and ``demand`` (the trigger is a demand signal: the words of
    the comment)."""

    scale_up: str
    scale_down_window: int
    max_replicas: int
    demand: bool

    def spec(self) -> dict[str, Any]:
        """``horizontalPodAutoscalerConfig.behavior``."""
        out: dict[str, Any] = {}
        if self.scale_up == "fast":
            out["scaleUp"] = {
                "stabilizationWindowSeconds": 0,
                "selectPolicy": "Max",
                "policies": [
                    {"type": "Percent", "value": FAST_PERCENT, "periodSeconds": SYNC_S},
                    {"type": "Pods", "value": self.max_replicas, "periodSeconds": SYNC_S},
                ],
            }
        out["scaleDown"] = {
            "stabilizationWindowSeconds": self.scale_down_window,
            "policies": [dict(_SCALE_DOWN_POLICY)],
        }
        return out

    def says(self) -> tuple[str, str]:
        """The comment, a paragraph per direction: what it does, why, and the flag that changes it."""
        n = self.max_replicas
        climb = "→".join(str(c) for c in default_climb(n))
        default = f"the larger of +100% and +4 pods per {SYNC_S}s, a sync per step ({climb})"
        if self.scale_up == "fast":
            up = (
                f"behavior.scaleUp: to the count the trigger asks for in one HPA sync ({SYNC_S}s): no "
                f"stabilization, the larger of +{FAST_PERCENT}% and +{n} pods per {SYNC_S}s (1→{n} at "
                "once; from zero, one sync after KEDA's activation). A demand signal asks for its count "
                f"once; the HPA's default, {default}, would climb to it (--scale-up default for that). A "
                "noisy signal can overshoot: the trigger's window smooths it."
            )
        else:
            up = (
                f"behavior.scaleUp: the HPA's default, {default}; --scale-up fast for the asked count in "
                "one sync."
            )
        window = self.scale_down_window
        down = (
            f"behavior.scaleDown: the HPA keeps the largest count asked for in the last {window}s, then "
            "removes 1 pod per 60s"
        )
        if self.demand:
            down += (
                ": a replica that loads a model takes minutes to start, so a burst that comes back within "
                f"{window}s finds its replicas, at the price of their GPU-hours when none does"
            )
        return up, f"{down} (--scale-down-stabilization)."


def default_climb(max_replicas: int, start: int = 1) -> list[int]:
    """The counts the HPA's default scale-up passes from ``start`` to ``max_replicas``, one per sync:
    ``max(c + 4, 2c)`` (its Pods 4 and Percent 100 policies, ``selectPolicy: Max``)."""
    counts = [start]
    while counts[-1] < max_replicas:
        c = counts[-1]
        counts.append(min(max_replicas, max(c + 4, 2 * c)))
    return counts


def check(scale_up: str | None, scale_down_window: int | None) -> None:
    """The flags' values: a bad one is a ``UsageError`` naming the flag, the value and what is allowed."""
    if scale_up is not None and scale_up not in SCALE_UP:
        raise UsageError(f'--scale-up "{scale_up}" must be one of [{", ".join(SCALE_UP)}]')
    if scale_down_window is not None:
        check_ints([("--scale-down-stabilization", scale_down_window, 0, MAX_STABILIZATION_S)])


def choose(
    scale_up: str | None, scale_down_window: int | None, *, max_replicas: int, demand: bool
) -> HpaBehavior:
    """The behavior for the flags (checked), ``None`` taking the default for a ``demand`` trigger or for
    another."""
    check(scale_up, scale_down_window)
    return HpaBehavior(
        scale_up=scale_up or ("fast" if demand else "default"),
        scale_down_window=scale_down_window if scale_down_window is not None else SCALE_DOWN_S,
        max_replicas=max_replicas,
        demand=demand,
    )
