"""A ``keda.sh/v1alpha1 ScaledObject`` as users write it, parsed for the simulator.

Defaults follow KEDA's (``pollingInterval`` 30, ``cooldownPeriod`` 300, ``minReplicaCount`` 0,
``maxReplicaCount`` 100, ``metricType`` AverageValue). A ``prometheus`` trigger stands for the signal the
policy's Prometheus pipeline says its query computes; a gpuscale trigger (``external``, ``external-push``) is
read by the scaler's own metadata parser, so the simulator decides with the scaler's code.
"""

from __future__ import annotations

from typing import Literal, cast

from ..scaling.errors import MetadataError
from ..scaling.metadata import TriggerMetadata, parse_metadata
from ..scaling.profiles import ProfileSet, exact
from ._check import Checker
from ._hpa_manifest import header, parse_behavior, prom_signal
from .hpa import Behavior, TargetType
from .keda import Fallback, FallbackBehavior, ScaledObjectSpec, TriggerSpec, hpa_for
from .pipeline import parse_signal
from .policy import MetricSource, Policy

__all__ = ["SIM_METRICS", "parse_scaled_object"]

_TRIGGER_TYPES = ("prometheus", "external", "external-push")
_PROM_KEYS = (
    "serverAddress",
    "query",
    "threshold",
    "activationThreshold",
    "ignoreNullValues",
    "namespace",
    "customHeaders",
    "queryParameters",
    "unsafeSsl",
    "timeout",
)
_SPEC_KEYS = (
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "minReplicaCount",
    "maxReplicaCount",
    "idleReplicaCount",
    "fallback",
    "advanced",
    "triggers",
)
_FALLBACK_BEHAVIORS = ("static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower")


# The gpuscale trigger metrics the simulator feeds the scaler's code: GPU utilization, and the engine's
# gauges (``workload.Observation``: waiting, running, KV-cache fill) and its finished-requests counter (so
# ``request_rate``, the arrivals); not its latency histograms or token counters, which the workload model
# does not produce.
SIM_METRICS = ("gpu_utilization", "queue_length", "requests_in_flight", "kv_cache_usage", "request_rate")
_ENGINE_SIGNALS = {"queue_length": "queue", "requests_in_flight": "in_flight", "kv_cache_usage": "kv_cache"}


def _gpuscale_metadata(
    c: Checker, meta: dict[str, object], mpath: str, profiles: ProfileSet
) -> TriggerMetadata | None:
    """A gpuscale trigger's metadata, read by the scaler's own parser (``gpuscale.scaling``): its keys,
    defaults, profiles and messages. KEDA passes metadata as strings; YAML numbers and booleans are taken as
    the text KEDA would pass."""
    text: dict[str, str] = {}
    for key, value in meta.items():
        if isinstance(value, bool):
            text[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            text[key] = exact(float(value)) if isinstance(value, float) else str(value)
        else:
            c.bad(f"{mpath}.{key}", value, "a string (KEDA passes trigger metadata as strings)")
    try:
        md = parse_metadata(text, profiles)
    except MetadataError as e:
        for problem in e.problems:
            c.fail(mpath, problem)
        return None
    for key, value, allowed in (("metric", md.metric, SIM_METRICS), ("share", md.share, ("gpu",))):
        if value not in allowed:
            origin = f' (from profile "{md.profile}")' if key not in text and md.profile else ""
            c.fail(
                mpath,
                f'parameter "{key}" value "{value}"{origin}: the simulator models {key} '
                f"{', '.join(allowed)} only",
            )
    return md


def _trigger(
    c: Checker, raw: object, path: str, prom: dict[str, object], profiles: ProfileSet
) -> tuple[TriggerSpec, MetricSource] | None:
    if not isinstance(raw, dict):
        c.bad(path, raw, "a mapping")
        return None
    c.known(raw, path, ("type", "name", "metricType", "metadata", "authenticationRef", "useCachedMetrics"))
    kind = c.string(raw, "type", path, default=None, choices=_TRIGGER_TYPES)
    if raw.get("type") not in _TRIGGER_TYPES:
        return None
    metric_type = c.string(raw, "metricType", path, default="AverageValue", choices=("AverageValue", "Value"))
    if c.boolean(raw, "useCachedMetrics", path, default=False):
        c.bad(f"{path}.useCachedMetrics", True, "false (the simulator models live queries only)")
    meta = c.mapping(raw, "metadata", path, required=True) or {}
    name = str(raw.get("name") or path.rsplit(".", 1)[-1])
    mt = cast(TargetType, metric_type)
    if kind == "prometheus":
        return _prometheus_trigger(c, meta, path, name, mt, prom)
    return _gpuscale_trigger(
        c, meta, path, name, mt, cast(Literal["external", "external-push"], kind), profiles
    )


def _prometheus_trigger(
    c: Checker, meta: dict[str, object], path: str, name: str, mt: TargetType, prom: dict[str, object]
) -> tuple[TriggerSpec, MetricSource] | None:
    """KEDA's ``prometheus`` trigger: its thresholds, and the signal the pipeline says its query computes."""
    mpath = f"{path}.metadata"
    c.known(meta, mpath, _PROM_KEYS)
    c.string(meta, "serverAddress", mpath, default=None)
    c.string(meta, "query", mpath, default=None)
    target = c.number(meta, "threshold", mpath, default=None, minimum=0, exclusive=True, text=True)
    activation = c.number(meta, "activationThreshold", mpath, default=0.0, minimum=0, text=True)
    ignore = c.boolean(meta, "ignoreNullValues", mpath, default=True, text=True)
    src = prom_signal(c, prom, name, path.split(".scaledObject", 1)[0], per_pod=False)
    if src is None:
        return None
    trig = TriggerSpec(name, "prometheus", mt, target, activation, str(src.signal), ignore_null_values=ignore)
    return trig, MetricSource(src.signal, "prometheus", trig)


def _gpuscale_trigger(
    c: Checker,
    meta: dict[str, object],
    path: str,
    name: str,
    mt: TargetType,
    kind: Literal["external", "external-push"],
    profiles: ProfileSet,
) -> tuple[TriggerSpec, MetricSource] | None:
    """A gpuscale trigger: its metadata as the scaler reads it, and the signal its metric stands for."""
    md = _gpuscale_metadata(c, meta, f"{path}.metadata", profiles)
    if md is None:
        return None
    field = _ENGINE_SIGNALS.get(md.metric, "gpu_utilization")
    additive = md.metric in ("queue_length", "requests_in_flight")  # the scaler sums them over the pods
    text = "demand" if md.metric == "request_rate" else f"{'sum' if additive else md.aggregation}({field})"
    signal = parse_signal(text)
    assert signal is not None
    trig = TriggerSpec(
        name,
        kind,
        mt,
        md.target_value,
        md.activation_value,
        str(signal),
        md.scope,
        metadata=md,
    )
    return trig, MetricSource(signal, "gpuscale", trig)


def parse_scaled_object(
    c: Checker, doc: dict[str, object], path: str, prom: dict[str, object], profiles: ProfileSet
) -> Policy | None:
    """A ScaledObject's policy: the HPA KEDA makes of it and one metric source per trigger."""
    spec = header(c, doc, path, "keda.sh/v1alpha1", "ScaledObject")
    if spec is None:
        return None
    sp = f"{path}.spec"
    c.known(spec, sp, _SPEC_KEYS)
    minimum, maximum, idle = _replica_counts(c, spec, sp)
    fallback = _fallback(c, spec, sp)
    behavior = _advanced_behavior(c, spec, sp)
    parsed = [
        _trigger(c, t, f"{sp}.triggers[{i}]", prom, profiles)
        for i, t in enumerate(c.sequence(spec, "triggers", sp, required=True))
    ]
    pairs = [p for p in parsed if p is not None]
    so = ScaledObjectSpec(
        triggers=tuple(t for t, _ in pairs),
        polling_interval=c.integer(spec, "pollingInterval", sp, default=30, minimum=1),
        cooldown_period=c.integer(spec, "cooldownPeriod", sp, default=300, minimum=0),
        initial_cooldown_period=c.integer(spec, "initialCooldownPeriod", sp, default=0, minimum=0),
        min_replica_count=minimum,
        max_replica_count=max(maximum, 1),
        idle_replica_count=idle,
        fallback=fallback,
        behavior=behavior,
    )
    return Policy("", hpa_for(so), tuple(s for _, s in pairs), scaled_object=so)


def _replica_counts(c: Checker, spec: dict[str, object], sp: str) -> tuple[int, int, int | None]:
    """``minReplicaCount``, ``maxReplicaCount`` and ``idleReplicaCount`` (``None`` when not given)."""
    minimum = c.integer(spec, "minReplicaCount", sp, default=0, minimum=0)
    maximum = c.integer(spec, "maxReplicaCount", sp, default=100, minimum=0)
    if maximum < minimum or maximum == 0:
        c.bad(f"{sp}.maxReplicaCount", maximum, f"an integer >= 1 and >= minReplicaCount ({minimum})")
    idle: int | None = None
    if spec.get("idleReplicaCount") is not None:
        idle = c.integer(spec, "idleReplicaCount", sp, default=0, minimum=0)
        # KEDA compares it with the HPA's minimum, max(1, minReplicaCount): 0 with a minimum of 0 is valid
        if idle >= max(1, minimum):
            c.bad(
                f"{sp}.idleReplicaCount",
                idle,
                f"an integer < max(1, minReplicaCount) ({max(1, minimum)})",
            )
    return minimum, maximum, idle


def _fallback(c: Checker, spec: dict[str, object], sp: str) -> Fallback | None:
    """``fallback``: the replicas KEDA holds after ``failureThreshold`` failed polls."""
    fb = c.mapping(spec, "fallback", sp, required=False)
    if fb is None:
        return None
    here = f"{sp}.fallback"
    c.known(fb, here, ("failureThreshold", "replicas", "behavior"))
    return Fallback(
        c.integer(fb, "failureThreshold", here, default=None, minimum=1),
        c.integer(fb, "replicas", here, default=None, minimum=1),
        cast(FallbackBehavior, c.string(fb, "behavior", here, default="static", choices=_FALLBACK_BEHAVIORS)),
    )


def _advanced_behavior(c: Checker, spec: dict[str, object], sp: str) -> Behavior | None:
    """``advanced.horizontalPodAutoscalerConfig.behavior``: the HPA's behavior KEDA passes on."""
    adv = c.mapping(spec, "advanced", sp, required=False)
    if adv is None:
        return None
    c.known(adv, f"{sp}.advanced", ("horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount"))
    hc = c.mapping(adv, "horizontalPodAutoscalerConfig", f"{sp}.advanced", required=False)
    if hc is None:
        return None
    hp = f"{sp}.advanced.horizontalPodAutoscalerConfig"
    c.known(hc, hp, ("name", "behavior"))
    return parse_behavior(c, hc, hp)
