"""``query --explain`` and the scaler's ``/explain``: what a ScaledObject resolved to and how its answer came
about, for people. Read-only: it asks the service what a call would (``ExternalScalerService.evaluate``) and
shows the parts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..scaling.aggregate import extractor, smooth
from ..scaling.keys import ENGINE_METRICS
from .status import status_code
from .wire import ScaledObjectKey

if TYPE_CHECKING:
    from .service import ExternalScalerService

__all__ = ["explain"]


async def explain(service: ExternalScalerService, key: ScaledObjectKey) -> dict[str, object]:
    """What a ScaledObject resolved to and how its answer came about, for people (``query --explain``):
    its pods and their nodes, each GPU's smoothed value, sample count and newest sample's age, which were
    left out and why, the missing pods, and the answer (or the error KEDA gets)."""
    out: dict[str, object] = {"scaledObject": f"{key.namespace}/{key.name}"}
    try:
        md = service._parse(key)
        query = await service.query(key, md)
    except Exception as e:
        out["error"] = {"code": status_code(e).name, "message": str(e)}
        return out
    out["metadata"] = {
        "metric": md.metric,
        "aggregation": md.aggregation,
        "targetValue": md.target_value,
        "window": md.window,
        "staleAfter": md.stale_after,
        "scope": md.scope,
        "profile": md.profile,
        "model": md.model,
        "scaleAhead": md.scale_ahead,
        "kvCacheGuard": md.kv_cache_guard,
        "engineDemand": md.engine_demand,
        "requestPath": None if md.request_path is None else str(md.request_path),
        "replicaRate": md.replica_rate,
    }
    out["query"] = {
        "scope": query.scope,
        "namespace": query.namespace,
        "podSelector": str(query.pod_selector) if query.pod_selector is not None else None,
        "nodeSelector": str(query.node_selector) if query.node_selector is not None else None,
    }
    now = service._clock()
    selection = service.source.select(query)
    gpus: list[dict[str, object]] = []
    for series in selection.series:
        gpu: dict[str, object] = {"uuid": series.uuid, "pod": series.pod}
        if md.metric in ENGINE_METRICS:
            gpus.append(gpu)
            continue
        extract = extractor(md.metric, md.share, series.pids, series.attributed)
        smoothed = smooth(series.samples, extract, now=now, window=md.window, stale_after=md.stale_after)
        if smoothed is None:
            newest = series.samples[-1].timestamp if len(series.samples) else None
            gpu["leftOut"] = (
                "no sample of the metric newer than staleAfter"
                if newest is None or now - newest > md.stale_after
                else "its fresh samples do not report the metric"
            )
            gpu["newestSampleAge"] = None if newest is None else round(now - newest, 3)
        else:
            gpu["value"] = smoothed.value
            gpu["samples"] = smoothed.samples
            gpu["newestSampleAge"] = round(smoothed.newest_age, 3)
        gpus.append(gpu)
    out["gpus"] = gpus
    gpu_pods, _ = service._gpu_pods(query, selection)
    starts = {p.pod: p.ready_at - p.scheduled_at for p in selection.started}
    for p in service._listed(query) or ():
        if p.scheduled_at is not None and p.ready_at is not None:
            starts.setdefault(p.name, p.ready_at - p.scheduled_at)
    out["gpuPods"] = [
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
    if query.scope == "workload":
        out["coldStartSeconds"] = service.cold_starts.seconds(f"{key.namespace}/{key.name}")
        if md.metric in ENGINE_METRICS:
            out["replicaCapacity"] = service.capacities.rate(f"{key.namespace}/{key.name}")
    if selection.engines:
        out["engines"] = [
            {"pod": e.pod, "readings": len(e.samples), "missing": e.missing} for e in selection.engines
        ]
    if md.request_path is not None and query.scope == "workload":
        try:
            if service.request_paths is None:
                service._request_path(key, md, query, now)  # raises: no API
            assert service.request_paths is not None
            out["requestPath"] = service.request_paths.describe(key.namespace, md)
        except Exception as e:
            out["requestPath"] = {"error": {"code": status_code(e).name, "message": str(e)}}
    try:
        result = service.evaluate(md, query, key=key)
    except Exception as e:
        out["error"] = {"code": status_code(e).name, "message": str(e)}
        return out
    out["answer"] = {
        "value": result.value,
        "aggregate": result.aggregate,
        "active": result.active,
        "pods": result.pods,
        "gpus": result.gpus,
        "missingPods": result.missing,
        "missingWhere": list(result.missing_where),
        "loadingPods": result.loading,
        # how the decisions moved it (scaling.answer): "ahead 120 s", "N-1 guard", "KV-cache guard",
        # "all pods loading", "uncapped by the engines' demand (x1.80)", "" (the plain value); and the
        # present value (the newest readings'), when the answer would scale down (where the guards look)
        "decided": result.decided,
        "present": result.present,
    }
    return out
