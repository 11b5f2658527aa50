"""Policies as users write them: a ``keda.sh/v1alpha1 ScaledObject``, an ``autoscaling/v2
HorizontalPodAutoscaler`` or an oracle, plus the metric pipeline behind it and the faults it meets, parsed
into ``loop.Policy``.

The ScaledObject is read in ``_keda_manifest``, with KEDA's defaults; the HPA and its ``behavior`` in
``_hpa_manifest``, with the API's; this module reads what a policy adds around them: the pipeline, the
offsets, the initial replicas, the faults, and the oracle, which reads no metric.
"""

from __future__ import annotations

from typing import Literal, cast

from ..scaling.profiles import ProfileSet
from ._check import Checker
from ._hpa_manifest import parse_behavior, parse_hpa
from ._keda_manifest import parse_scaled_object
from .faults import FAULT_TYPES, Fault
from .hpa import HpaSpec
from .pipeline import GpuscalePipeline, PrometheusPipeline
from .policy import Oracle, Policy

__all__ = ["parse_behavior", "parse_policy"]


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
        policy = None if doc is None else parse_scaled_object(c, doc, here, prom_raw, profile_set)
    else:
        doc = c.mapping(raw, "hpa", path, required=True)
        policy = parse_hpa(c, doc, f"{path}.hpa", prom_raw) if doc is not None else None
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
