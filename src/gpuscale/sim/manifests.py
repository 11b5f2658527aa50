"""Policies as users write them: a ``keda.sh/v1alpha1 ScaledObject`` or an ``autoscaling/v2
HorizontalPodAutoscaler``, plus the metric pipeline behind it, parsed into ``engine.Policy``.

Defaults follow the APIs: KEDA's (``pollingInterval`` 30, ``cooldownPeriod`` 300, ``minReplicaCount`` 0,
``maxReplicaCount`` 100, ``metricType`` AverageValue) and ``SetDefaults_HorizontalPodAutoscalerBehavior``
(field by field: a given ``policies`` list replaces the default list; unset fields keep their defaults).
"""

from __future__ import annotations

from typing import Literal, cast

from ..scaling.errors import MetadataError
from ..scaling.metadata import TriggerMetadata, parse_metadata
from ..scaling.profiles import ProfileSet, exact
from ._check import Checker
from .engine import MetricSource, Oracle, Policy
from .faults import FAULT_TYPES, Fault
from .hpa import (
    Behavior,
    HpaSpec,
    MetricSpec,
    ScalingPolicy,
    ScalingRules,
    TargetType,
    default_behavior_rules,
)
from .keda import Fallback, FallbackBehavior, ScaledObjectSpec, TriggerSpec, hpa_for
from .pipeline import (
    PER_POD_SYNTAX,
    SCALAR_SYNTAX,
    SIGNAL_SYNTAX,
    GpuscalePipeline,
    PrometheusPipeline,
    parse_signal,
)
from .quantity import parse_quantity_milli

__all__ = ["parse_behavior", "parse_policy"]

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


def _header(c: Checker, doc: dict[str, object], path: str, api: str, kind: str) -> dict[str, object] | None:
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


def _prom_signal(
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


# The gpuscale trigger metrics the simulator feeds the scaler's code: GPU utilization, and the engine's
# gauges (``workload.Observation``: waiting, running, KV-cache fill) and its finished-requests counter (so
# ``request_rate``, the arrivals); not its latency histograms or token counters, which the workload model
# does not produce.
SIM_METRICS = ("gpu_utilization", "queue_length", "requests_in_flight", "kv_cache_usage", "request_rate")
_ENGINE_SIGNALS = {"queue_length": "queue", "requests_in_flight": "in_flight", "kv_cache_usage": "kv_cache"}


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
    mpath = f"{path}.metadata"
    name = str(raw.get("name") or path.rsplit(".", 1)[-1])
    mt = cast(TargetType, metric_type)
    if kind == "prometheus":
        c.known(meta, mpath, _PROM_KEYS)
        c.string(meta, "serverAddress", mpath, default=None)
        c.string(meta, "query", mpath, default=None)
        target = c.number(meta, "threshold", mpath, default=None, minimum=0, exclusive=True, text=True)
        activation = c.number(meta, "activationThreshold", mpath, default=0.0, minimum=0, text=True)
        ignore = c.boolean(meta, "ignoreNullValues", mpath, default=True, text=True)
        src = _prom_signal(c, prom, name, path.split(".scaledObject", 1)[0], per_pod=False)
        if src is None:
            return None
        trig = TriggerSpec(
            name, "prometheus", mt, target, activation, str(src.signal), ignore_null_values=ignore
        )
        return trig, MetricSource(src.signal, "prometheus", trig)
    md = _gpuscale_metadata(c, meta, mpath, profiles)
    if md is None:
        return None
    field = _ENGINE_SIGNALS.get(md.metric, "gpu_utilization")
    additive = md.metric in ("queue_length", "requests_in_flight")  # the scaler sums them over the pods
    text = "demand" if md.metric == "request_rate" else f"{'sum' if additive else md.aggregation}({field})"
    signal = parse_signal(text)
    assert signal is not None
    trig = TriggerSpec(
        name,
        cast(Literal["external", "external-push"], kind),
        mt,
        md.target_value,
        md.activation_value,
        str(signal),
        md.scope,
        metadata=md,
    )
    return trig, MetricSource(signal, "gpuscale", trig)


def _scaled_object(
    c: Checker, doc: dict[str, object], path: str, prom: dict[str, object], profiles: ProfileSet
) -> Policy | None:
    spec = _header(c, doc, path, "keda.sh/v1alpha1", "ScaledObject")
    if spec is None:
        return None
    sp = f"{path}.spec"
    c.known(
        spec,
        sp,
        (
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
        ),
    )
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
    fallback: Fallback | None = None
    fb = c.mapping(spec, "fallback", sp, required=False)
    if fb is not None:
        c.known(fb, f"{sp}.fallback", ("failureThreshold", "replicas", "behavior"))
        fallback = Fallback(
            c.integer(fb, "failureThreshold", f"{sp}.fallback", default=None, minimum=1),
            c.integer(fb, "replicas", f"{sp}.fallback", default=None, minimum=1),
            cast(
                FallbackBehavior,
                c.string(
                    fb,
                    "behavior",
                    f"{sp}.fallback",
                    default="static",
                    choices=(
                        "static",
                        "currentReplicas",
                        "currentReplicasIfHigher",
                        "currentReplicasIfLower",
                    ),
                ),
            ),
        )
    behavior = None
    adv = c.mapping(spec, "advanced", sp, required=False)
    if adv is not None:
        c.known(adv, f"{sp}.advanced", ("horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount"))
        hc = c.mapping(adv, "horizontalPodAutoscalerConfig", f"{sp}.advanced", required=False)
        if hc is not None:
            hp = f"{sp}.advanced.horizontalPodAutoscalerConfig"
            c.known(hc, hp, ("name", "behavior"))
            behavior = parse_behavior(c, hc, hp)
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


def _hpa(c: Checker, doc: dict[str, object], path: str, prom: dict[str, object]) -> Policy | None:
    spec = _header(c, doc, path, "autoscaling/v2", "HorizontalPodAutoscaler")
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
        src = _prom_signal(c, prom, name, path.rsplit(".hpa", 1)[0], per_pod=kind == "Pods")
        if milli is not None and src is not None:
            metrics.append(
                MetricSpec(name, cast(Literal["Pods", "External"], kind), cast(TargetType, ttype), milli)
            )
            sources.append(src)
    spec_obj = HpaSpec(minimum, max(maximum, minimum), tuple(metrics), parse_behavior(c, spec, sp))
    return Policy("", spec_obj, tuple(sources))


def _pipelines(
    c: Checker, raw: dict[str, object], path: str
) -> tuple[GpuscalePipeline, PrometheusPipeline, dict[str, object]]:
    pipe = c.mapping(raw, "pipeline", path, required=False) or {}
    pp = f"{path}.pipeline"
    c.known(pipe, pp, ("gpuscale", "prometheus"))
    g = c.mapping(pipe, "gpuscale", pp, required=False) or {}
    c.known(
        g,
        f"{pp}.gpuscale",
        ("samplingIntervalSeconds", "delaySeconds", "readEngines", "requestPathDelaySeconds"),
    )
    gpuscale = GpuscalePipeline(
        c.integer(g, "samplingIntervalSeconds", f"{pp}.gpuscale", default=1, minimum=1),
        c.integer(g, "delaySeconds", f"{pp}.gpuscale", default=0, minimum=0),
        c.boolean(g, "readEngines", f"{pp}.gpuscale", default=False),
        c.integer(g, "requestPathDelaySeconds", f"{pp}.gpuscale", default=1, minimum=0, maximum=3600),
    )
    p = c.mapping(pipe, "prometheus", pp, required=False) or {}
    ppp = f"{pp}.prometheus"
    c.known(
        p,
        ppp,
        (
            "exporterIntervalSeconds",
            "scrapeIntervalSeconds",
            "delaySeconds",
            "rangeSeconds",
            "exporterOffsetSeconds",
            "scrapeOffsetSeconds",
            "signal",
            "signals",
        ),
    )
    prometheus = PrometheusPipeline(
        c.integer(p, "exporterIntervalSeconds", ppp, default=30, minimum=1),
        c.integer(p, "scrapeIntervalSeconds", ppp, default=30, minimum=1),
        c.integer(p, "delaySeconds", ppp, default=0, minimum=0),
        c.integer(p, "rangeSeconds", ppp, default=0, minimum=0),
        c.integer(p, "exporterOffsetSeconds", ppp, default=0, minimum=0),
        c.integer(p, "scrapeOffsetSeconds", ppp, default=0, minimum=0),
    )
    return gpuscale, prometheus, p


def _faults(c: Checker, raw: dict[str, object], path: str, has_gpuscale: bool) -> tuple[Fault, ...]:
    """A policy's ``faults``: each ``{type, fromSeconds, untilSeconds?, pods?}`` (``faults.py``)."""
    out: list[Fault] = []
    for i, item in enumerate(c.sequence(raw, "faults", path, required=False)):
        here = f"{path}.faults[{i}]"
        if not isinstance(item, dict):
            c.bad(here, item, "a mapping with type, fromSeconds and optionally untilSeconds (and pods)")
            continue
        kind = c.string(item, "type", here, default=None, choices=FAULT_TYPES)
        if item.get("type") not in FAULT_TYPES:
            continue
        c.known(
            item,
            here,
            ("type", "fromSeconds", "untilSeconds", *(("pods",) if kind == "samples-missing" else ())),
        )
        start = c.integer(item, "fromSeconds", here, default=None, minimum=0)
        until: int | None = None
        if item.get("untilSeconds") is not None:
            until = c.integer(item, "untilSeconds", here, default=start + 1, minimum=start + 1)
        pods = 0
        if kind == "samples-missing":
            pods = c.integer(item, "pods", here, default=None, minimum=1)
            if not has_gpuscale:
                c.fail(
                    f"{here}.type",
                    "samples-missing applies to gpuscale triggers (external, external-push), and this policy "
                    "has none; for a prometheus trigger use trigger-error",
                )
        out.append(Fault(cast(Literal["samples-missing", "trigger-error"], kind), start, until, pods))
    return tuple(out)


# what only a policy that reads metrics has: an oracle reads none
_METRIC_KEYS = ("pipeline", "kedaPollOffsetSeconds", "newScaledObject", "faults")


def _oracle(c: Checker, raw: dict[str, object], path: str, name: str) -> Policy | None:
    """An ``oracle`` policy: ``{minReplicas (1), maxReplicas (100), drainQueue (true), controller (hpa)}``;
    it asks for the replicas the present demand (and queue) needs, through the HPA's syncs and limits
    (``controller: hpa``, at ``hpaSyncOffsetSeconds``) or every second itself (``direct``):
    ``engine.Oracle``."""
    spec = c.mapping(raw, "oracle", path, required=True)
    if spec is None:
        return None
    here = f"{path}.oracle"
    c.known(spec, here, ("minReplicas", "maxReplicas", "drainQueue", "controller"))
    minimum = c.integer(spec, "minReplicas", here, default=1, minimum=0)
    maximum = c.integer(spec, "maxReplicas", here, default=100, minimum=1)
    if maximum < minimum:
        c.bad(f"{here}.maxReplicas", maximum, f"an integer >= minReplicas ({minimum})")
        maximum = max(1, minimum)
    controller = cast(
        Literal["hpa", "direct"], c.string(spec, "controller", here, default="hpa", choices=("hpa", "direct"))
    )
    for key in _METRIC_KEYS:
        if key in raw:
            c.fail(f"{path}.{key}", "does not apply to an oracle policy, which reads no metric")
    if controller == "direct" and "hpaSyncOffsetSeconds" in raw:
        c.fail(f"{path}.hpaSyncOffsetSeconds", "does not apply to an oracle with controller: direct (no HPA)")
    initial = c.integer(raw, "initialReplicas", path, default=-1, minimum=0)
    return Policy(
        name=name,
        hpa=HpaSpec(minimum, maximum, (), None),
        sources=(),
        hpa_offset_seconds=c.integer(raw, "hpaSyncOffsetSeconds", path, default=0, minimum=0),
        initial_replicas=None if initial < 0 else initial,
        oracle=Oracle(minimum, maximum, c.boolean(spec, "drainQueue", here, default=True), controller),
    )


def parse_policy(c: Checker, raw: object, path: str, profiles: ProfileSet | None = None) -> Policy | None:
    """One entry of a scenario's ``policies``. ``profiles``: the profiles a gpuscale trigger may name (the
    built-in ones by default; the CLI adds a ``--profiles`` file's)."""
    if not isinstance(raw, dict):
        c.bad(path, raw, "a mapping with name and scaledObject, hpa or oracle")
        return None
    c.known(
        raw,
        path,
        (
            "name",
            "description",
            "pipeline",
            "scaledObject",
            "hpa",
            "oracle",
            "hpaSyncOffsetSeconds",
            "kedaPollOffsetSeconds",
            "initialReplicas",
            "newScaledObject",
            "faults",
        ),
    )
    name = c.string(raw, "name", path, default=None)
    kinds = [k for k in ("scaledObject", "hpa", "oracle") if raw.get(k) is not None]
    if len(kinds) != 1:
        c.fail(path, "needs exactly one of scaledObject, hpa, oracle")
        return None
    if kinds == ["oracle"]:
        return _oracle(c, raw, path, name)
    gpuscale, prometheus, prom_raw = _pipelines(c, raw, path)
    has_so = kinds == ["scaledObject"]
    if has_so:
        doc = c.mapping(raw, "scaledObject", path, required=True)
        here = f"{path}.scaledObject"
        profile_set = ProfileSet.builtin() if profiles is None else profiles
        policy = None if doc is None else _scaled_object(c, doc, here, prom_raw, profile_set)
    else:
        doc = c.mapping(raw, "hpa", path, required=True)
        policy = _hpa(c, doc, f"{path}.hpa", prom_raw) if doc is not None else None
    if policy is None:
        return None
    if gpuscale.read_engines and not any(
        s.trigger is not None
        and s.trigger.metadata is not None
        and s.trigger.metadata.metric == "gpu_utilization"
        and s.trigger.metadata.scope == "workload"
        and s.trigger.metadata.engine_demand != "off"
        for s in policy.sources
    ):
        c.fail(
            f"{path}.pipeline.gpuscale.readEngines",
            "applies to a gpuscale gpu_utilization trigger in scope workload without engineDemand: off "
            "(engine metrics always read the engines), and this policy has none",
        )
    initial = c.integer(raw, "initialReplicas", path, default=-1, minimum=0)
    return Policy(
        name=name,
        hpa=policy.hpa,
        sources=policy.sources,
        scaled_object=policy.scaled_object,
        gpuscale=gpuscale,
        prometheus=prometheus,
        hpa_offset_seconds=c.integer(raw, "hpaSyncOffsetSeconds", path, default=0, minimum=0),
        keda_offset_seconds=c.integer(raw, "kedaPollOffsetSeconds", path, default=0, minimum=0),
        initial_replicas=None if initial < 0 else initial,
        new_scaled_object=c.boolean(raw, "newScaledObject", path, default=False),
        faults=_faults(c, raw, path, any(s.via == "gpuscale" for s in policy.sources)),
    )
