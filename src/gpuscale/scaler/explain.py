"""``query --explain`` and the scaler's ``/explain``: what a ScaledObject resolved to and how its answer came
about, for people. Read-only: it asks the service what a call would (``ExternalScalerService.evaluate``) and
shows the parts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..scaling.aggregate import Evaluation, gpu_values
from ..scaling.keys import ENGINE_METRICS, KEYS
from ..scaling.metadata import TriggerMetadata
from .source import Query, Selection
from .status import status_code
from .wire import ScaledObjectKey

if TYPE_CHECKING:
    from .service import ExternalScalerService

__all__ = ["explain"]

_LEFT_OUT = {
    "stale": "no sample of the metric newer than staleAfter",
    "unsupported": "its fresh samples do not report the metric",
}


def _plain(value: object) -> object:
    """A metadata value as JSON has it: numbers, text and null as they are, selectors and references as
    their text."""
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


async def explain(service: ExternalScalerService, key: ScaledObjectKey) -> dict[str, object]:
    """What a ScaledObject resolved to and how its answer came about, for people (``query --explain``):
    its pods and their nodes, each GPU's smoothed value, sample count and newest sample's age, which were
    left out and why, the missing pods, and the answer (or the error KEDA gets)."""
    out: dict[str, object] = {"scaledObject": f"{key.namespace}/{key.name}"}
    try:
        md = service._parse(key)
        query = await service.query(key, md)
    except Exception as e:
        out["error"] = _error(e)
        return out
    out["metadata"] = {k.name: _plain(getattr(md, k.attr)) for k in KEYS if hasattr(md, k.attr)}
    out["query"] = {
        "scope": query.scope,
        "namespace": query.namespace,
        "podSelector": str(query.pod_selector) if query.pod_selector is not None else None,
        "nodeSelector": str(query.node_selector) if query.node_selector is not None else None,
    }
    now = service._clock()
    selection = service.source.select(query)
    out["gpus"] = _gpus(md, selection, now)
    out["gpuPods"] = _gpu_pods(service, query, selection)
    name = f"{key.namespace}/{key.name}"
    if query.scope == "workload":
        out["coldStartSeconds"] = service.cold_starts.seconds(name)
        if md.metric in ENGINE_METRICS:
            out["replicaCapacity"] = service.capacities.rate(name)
    if selection.engines:
        out["engines"] = [
            {"pod": e.pod, "readings": len(e.samples), "missing": e.missing} for e in selection.engines
        ]
    if md.request_path is not None and query.scope == "workload":
        out["requestPath"] = _request_path(service, key, md, query, now)
    try:
        result = service.evaluate(md, query, key=key)
    except Exception as e:
        out["error"] = _error(e)
        return out
    out["answer"] = _answer(result)
    return out


def _error(e: Exception) -> dict[str, object]:
    return {"code": status_code(e).name, "message": str(e)}


def _gpus(md: TriggerMetadata, selection: Selection, now: float) -> list[dict[str, object]]:
    """Each GPU in scope: its smoothed value, samples and newest sample's age, or why it is left out (an
    engine metric: the GPUs alone, their values are not what it reads)."""
    if md.metric in ENGINE_METRICS:
        return [{"uuid": series.uuid, "pod": series.pod} for series in selection.series]
    gpus: list[dict[str, object]] = []
    for v in gpu_values(md, selection.series, now=now):
        gpu: dict[str, object] = {"uuid": v.uuid, "pod": v.pod}
        if v.smoothed is None:
            gpu["leftOut"] = _LEFT_OUT[v.left_out or "stale"]
            gpu["newestSampleAge"] = None if v.newest_age is None else round(v.newest_age, 3)
        else:
            gpu["value"] = v.smoothed.value
            gpu["samples"] = v.smoothed.samples
            gpu["newestSampleAge"] = round(v.smoothed.newest_age, 3)
        gpus.append(gpu)
    return gpus


def _gpu_pods(service: ExternalScalerService, query: Query, selection: Selection) -> list[dict[str, object]]:
    """The workload's GPU pods as the answer counts them, each with its node, readiness and cold start."""
    gpu_pods, _ = service._gpu_pods(query, selection)
    starts = {p.pod: p.ready_at - p.scheduled_at for p in selection.started}
    for p in service._listed(query) or ():
        if p.scheduled_at is not None and p.ready_at is not None:
            starts.setdefault(p.name, p.ready_at - p.scheduled_at)
    return [
        {
            "pod": p.name,
            "node": p.node,
            "agentConnected": p.connected,
            "reportedByAgent": p.reported,
            "ready": p.ready,
            "scheduledToReadySeconds": starts.get(p.name) if p.ready else None,
        }
        for p in gpu_pods
    ]


def _request_path(
    service: ExternalScalerService, key: ScaledObjectKey, md: TriggerMetadata, query: Query, now: float
) -> dict[str, object]:
    """What the scaler holds of the trigger's request path, or the error reading it gives."""
    try:
        if service.request_paths is None:
            service._request_path(key, md, query, now)  # raises: no API
        assert service.request_paths is not None
        return service.request_paths.describe(key.namespace, md)
    except Exception as e:
        return {"error": _error(e)}


def _answer(result: Evaluation) -> dict[str, object]:
    """The answer, with which decision moved it (``scaling.decisions.Decision``: "ahead", "N-1 guard",
    "request path", ...; null: the plain value), the same with its figures ("ahead 120 s"), and the present
    value (the newest readings'), when the answer would scale down (where the guards look)."""
    return {
        "value": result.value,
        "aggregate": result.aggregate,
        "active": result.active,
        "pods": result.pods,
        "gpus": result.gpus,
        "missingPods": result.missing,
        "missingWhere": list(result.missing_where),
        "loadingPods": result.loading,
        "decision": None if result.decision is None else result.decision.value,
        "decided": result.decided,
        "present": result.present,
    }
