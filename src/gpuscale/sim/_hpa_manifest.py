"""An ``autoscaling/v2 HorizontalPodAutoscaler`` as users write it, and its ``behavior``, for the simulator.

``behavior`` follows ``SetDefaults_HorizontalPodAutoscalerBehavior`` field by field: a given ``policies`` list
replaces the default list; unset fields keep their defaults. A ScaledObject's HPA
(``advanced.horizontalPodAutoscalerConfig``) is read with the same parts: the header, the behavior, and the
Prometheus signal a metric's query stands for.
"""

from __future__ import annotations

from typing import Literal, cast

from ._check import Checker
from .hpa import (
    Behavior,
    HpaSpec,
    MetricSpec,
    ScalingPolicy,
    ScalingRules,
    TargetType,
    default_behavior_rules,
)
from .pipeline import PER_POD_SYNTAX, SCALAR_SYNTAX, SIGNAL_SYNTAX, parse_signal
from .policy import MetricSource, Policy
from .quantity import parse_quantity_milli

__all__ = ["header", "parse_behavior", "parse_hpa", "prom_signal"]


def _rules(
    c: Checker, raw: dict[str, object] | None, path: str, direction: Literal["up", "down"]
) -> ScalingRules:
    base = default_behavior_rules(direction)
    if raw is None:
        return base
    c.known(raw, path, ("stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"))
    window = c.integer(raw, "stabilizationWindowSeconds", path, default=-1, minimum=0, maximum=3600)
    select = c.string(
        raw, "selectPolicy", path, default=base.select_policy, choices=("Max", "Min", "Disabled")
    )
    policies: list[ScalingPolicy] = []
    for i, item in enumerate(c.sequence(raw, "policies", path, required=False)):
        here = f"{path}.policies[{i}]"
        if not isinstance(item, dict):
            c.bad(here, item, "a mapping with type, value, periodSeconds")
            continue
        c.known(item, here, ("type", "value", "periodSeconds"))
        kind = c.string(item, "type", here, default=None, choices=("Pods", "Percent"))
        value = c.integer(item, "value", here, default=None, minimum=1)
        period = c.integer(item, "periodSeconds", here, default=None, minimum=1, maximum=1800)
        policies.append(ScalingPolicy(cast(Literal["Pods", "Percent"], kind), value, period))
    tol_milli: int | None = None
    if raw.get("tolerance") is not None:
        tol_milli = parse_quantity_milli(raw["tolerance"])
        if tol_milli is None or tol_milli < 0:
            c.bad(f"{path}.tolerance", raw["tolerance"], 'a quantity >= 0 such as "0.05" or "50m"')
            tol_milli = None
    return ScalingRules(
        stabilization_window_seconds=base.stabilization_window_seconds if window < 0 else window,
        select_policy=cast(Literal["Max", "Min", "Disabled"], select),
        policies=tuple(policies) if "policies" in raw else base.policies,
        tolerance=None if tol_milli is None else tol_milli / 1000,
    )


def parse_behavior(c: Checker, parent: dict[str, object], path: str) -> Behavior | None:
    raw = c.mapping(parent, "behavior", path, required=False)
    if raw is None:
        return None
    here = f"{path}.behavior"
    c.known(raw, here, ("scaleUp", "scaleDown"))
    return Behavior(
        scale_up=_rules(c, c.mapping(raw, "scaleUp", here, required=False), f"{here}.scaleUp", "up"),
        scale_down=_rules(c, c.mapping(raw, "scaleDown", here, required=False), f"{here}.scaleDown", "down"),
    )


def header(c: Checker, doc: dict[str, object], path: str, api: str, kind: str) -> dict[str, object] | None:
    c.string(doc, "apiVersion", path, default=None, choices=(api,))
    c.string(doc, "kind", path, default=None, choices=(kind,))
    spec = c.mapping(doc, "spec", path, required=True)
    if spec is not None and c.mapping(spec, "scaleTargetRef", f"{path}.spec", required=True) is not None:
        return spec
    return spec


def _signal_text(pipeline: dict[str, object], name: str) -> object:
    signals = pipeline.get("signals")
    if isinstance(signals, dict) and name in signals:
        return signals[name]
    return pipeline.get("signal")


def prom_signal(
    c: Checker, prom: dict[str, object], name: str, path: str, per_pod: bool
) -> MetricSource | None:
    text = _signal_text(prom, name)
    here = f"{path}.pipeline.prometheus.signal"
    if text is None:
        c.fail(here, f'is required for metric "{name}": what the query computes, {SIGNAL_SYNTAX}')
        return None
    signal = parse_signal(text) if isinstance(text, str) else None
    if signal is None or (signal.kind == "per_pod") != per_pod:
        need = PER_POD_SYNTAX if per_pod else SCALAR_SYNTAX
        c.bad(here, text, f'for metric "{name}" {need}')
        return None
    return MetricSource(signal, "prometheus")


def parse_hpa(c: Checker, doc: dict[str, object], path: str, prom: dict[str, object]) -> Policy | None:
    """An HPA's policy: its replicas, behavior, and one Prometheus metric source per metric."""
    spec = header(c, doc, path, "autoscaling/v2", "HorizontalPodAutoscaler")
    if spec is None:
        return None
    sp = f"{path}.spec"
    c.known(spec, sp, ("scaleTargetRef", "minReplicas", "maxReplicas", "metrics", "behavior"))
    minimum = c.integer(spec, "minReplicas", sp, default=1, minimum=1)
    maximum = c.integer(spec, "maxReplicas", sp, default=None, minimum=1)
    if maximum < minimum:
        c.bad(f"{sp}.maxReplicas", maximum, f"an integer >= minReplicas ({minimum})")
    metrics: list[MetricSpec] = []
    sources: list[MetricSource] = []
    for i, m in enumerate(c.sequence(spec, "metrics", sp, required=True)):
        here = f"{sp}.metrics[{i}]"
        if not isinstance(m, dict):
            c.bad(here, m, "a mapping")
            continue
        kind = c.string(m, "type", here, default=None, choices=("Pods", "External"))
        if m.get("type") not in ("Pods", "External"):
            continue
        key = kind.lower()
        c.known(m, here, ("type", key))
        body = c.mapping(m, key, here, required=True) or {}
        metric = c.mapping(body, "metric", f"{here}.{key}", required=True) or {}
        name = c.string(metric, "name", f"{here}.{key}.metric", default=None)
        target = c.mapping(body, "target", f"{here}.{key}", required=True) or {}
        tp = f"{here}.{key}.target"
        allowed = ("AverageValue",) if kind == "Pods" else ("AverageValue", "Value")
        ttype = c.string(target, "type", tp, default=None, choices=allowed)
        if target.get("type") not in allowed:
            continue
        field = "averageValue" if ttype == "AverageValue" else "value"
        milli = c.quantity(target, field, tp, required=True)
        src = prom_signal(c, prom, name, path.rsplit(".hpa", 1)[0], per_pod=kind == "Pods")
        if milli is not None and src is not None:
            metrics.append(
                MetricSpec(name, cast(Literal["Pods", "External"], kind), cast(TargetType, ttype), milli)
            )
            sources.append(src)
    spec_obj = HpaSpec(minimum, max(maximum, minimum), tuple(metrics), parse_behavior(c, spec, sp))
    return Policy("", spec_obj, tuple(sources))
