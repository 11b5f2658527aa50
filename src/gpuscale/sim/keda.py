"""KEDA: the HPA a ScaledObject creates, the operator's 0<->1 loop, and fallback.

Pure. ``hpa_for`` mirrors ``controllers/keda/hpa.go`` (min ``max(1, minReplicaCount)``, max default 100,
behavior copied or nil). ``request_scale`` mirrors ``RequestScale`` in
``pkg/scaling/executor/scale_scaledobjects.go``: activation 0->min(1), the N->0 drop after ``cooldownPeriod``
(straight from N, bypassing the HPA), ``idleReplicaCount``; on trigger errors no scale to zero (and no
``lastActiveTime`` refresh). ``fallback_milli`` is what the metrics server answers the HPA once a trigger
has failed more than ``failureThreshold`` times in a row: the only way fallback acts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..scaling.metadata import TriggerMetadata
from .hpa import Behavior, HpaSpec, MetricSpec, TargetType
from .quantity import keda_milli

__all__ = [
    "Fallback",
    "KedaState",
    "ScaleRequest",
    "ScaledObjectSpec",
    "TriggerSpec",
    "fallback_milli",
    "hpa_for",
    "request_scale",
]

FallbackBehavior = Literal["static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"]


@dataclass(frozen=True)
class TriggerSpec:
    """One trigger. ``kind`` is the KEDA trigger type (``prometheus``, ``external``, ``external-push``);
    ``target``/``activation`` are the threshold and activation threshold; ``signal`` names what the
    simulator measures for it (``pipeline.Signal``); ``scope`` and ``metadata`` (parsed by
    ``gpuscale.scaling``, as the scaler parses it) apply to gpuscale triggers."""

    name: str
    kind: Literal["prometheus", "external", "external-push"]
    metric_type: TargetType
    target: float
    activation: float
    signal: str
    scope: Literal["workload", "node", "pool"] = "workload"
    ignore_null_values: bool = True
    metadata: TriggerMetadata | None = None

    @property
    def push(self) -> bool:
        return self.kind == "external-push"


@dataclass(frozen=True)
class Fallback:
    failure_threshold: int
    replicas: int
    behavior: FallbackBehavior = "static"


@dataclass(frozen=True)
class ScaledObjectSpec:
    triggers: tuple[TriggerSpec, ...]
    polling_interval: int = 30
    cooldown_period: int = 300
    initial_cooldown_period: int = 0
    min_replica_count: int = 0
    max_replica_count: int = 100
    idle_replica_count: int | None = None
    fallback: Fallback | None = None
    behavior: Behavior | None = None


def hpa_for(so: ScaledObjectSpec) -> HpaSpec:
    """``newHPAForScaledObject``: External metrics ``s<i>-<type>``, target milli from the threshold as KEDA
    2.20 converts it (``keda_milli``)."""
    metrics = tuple(
        MetricSpec(
            name=f"s{i}-{t.kind}",
            source="External",
            target_type=t.metric_type,
            target_milli=keda_milli(t.target),
        )
        for i, t in enumerate(so.triggers)
    )
    return HpaSpec(
        min_replicas=so.min_replica_count if so.min_replica_count > 0 else 1,
        max_replicas=so.max_replica_count,
        metrics=metrics,
        behavior=so.behavior,
    )


@dataclass(frozen=True)
class KedaState:
    """Operator memory: ``status.lastActiveTime`` and each trigger's consecutive-failure count."""

    last_active_time: int | None = None
    created_at: int = 0
    failures: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScaleRequest:
    """``replicas`` is what KEDA writes to ``/scale`` (None: leaves it); ``reason`` says which branch."""

    state: KedaState
    replicas: int | None
    reason: str


def request_scale(
    so: ScaledObjectSpec, state: KedaState, current: int, active: bool, error: bool, now: int
) -> ScaleRequest:
    """``RequestScale`` after a poll (or a push) found the object ``active`` and/or in ``error``."""
    min_r = so.min_replica_count
    idle = so.idle_replica_count
    if active:
        if (idle is not None and current < min_r) or current == 0:
            target = min_r if min_r > 0 else 1  # scaleFromZeroOrIdle
            return ScaleRequest(_active(state, now), target, "activated (scale from zero/idle)")
        if error:  # some trigger failed: Ready Unknown, and lastActiveTime is not refreshed
            return ScaleRequest(state, None, "active, some triggers failing: HPA owns 1<->N")
        return ScaleRequest(_active(state, now), None, "active: HPA owns 1<->N")
    if error:
        # No scale to zero on errors. Fallback, when configured, reaches the HPA through the metrics server
        # (``fallback_milli``), never as a write here; without one the ScaledObject turns Ready=False.
        return ScaleRequest(state, None, "inactive with failing triggers: replicas kept")
    if (idle is not None and current > idle) or (current > 0 and min_r == 0):
        if state.last_active_time is None:
            expired = state.created_at + so.initial_cooldown_period < now
        else:
            expired = state.last_active_time + so.cooldown_period < now
        if expired:  # scaleToZeroOrIdle: straight from N
            return ScaleRequest(
                state, idle if idle is not None else min_r, "cooldown over: scale to zero/idle"
            )
        return ScaleRequest(state, None, "inactive: in cooldown")
    if current < min_r and idle is None:
        return ScaleRequest(state, min_r, "inactive: below minReplicaCount")
    return ScaleRequest(state, None, "inactive")


def _active(state: KedaState, now: int) -> KedaState:
    return KedaState(now, state.created_at, state.failures)


def fallback_milli(
    fallback: Fallback, metric_type: TargetType, target_milli: int, current: int, ready: int
) -> int:
    """The value the metrics server returns in fallback: ``target * replicas`` for AverageValue,
    ``target * replicas / readyReplicas`` for Value (scaledobject-spec.md, section fallback)."""
    replicas = fallback.replicas
    if fallback.behavior == "currentReplicas":
        replicas = current
    elif fallback.behavior == "currentReplicasIfHigher":
        replicas = max(current, fallback.replicas)
    elif fallback.behavior == "currentReplicasIfLower":
        replicas = min(current, fallback.replicas)
    if metric_type == "AverageValue":
        return target_milli * replicas
    return math.floor(target_milli * replicas / max(ready, 1))
