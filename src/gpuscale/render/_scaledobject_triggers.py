"""The ScaledObject's triggers, one builder per path, each with the comment that says why its metricType.

``external`` / ``external-push`` call the gpuscale scaler (or, in node scope, an agent); ``prometheus`` is
KEDA's Prometheus scaler over the agent's series, or over the engine pods' own for an engine metric; a
``--queue-target`` adds a second gpuscale trigger on the engine's waiting requests. The metricType rules are
in ``scaledobject``'s docstring.
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ..scaling.errors import MetadataError
from ..scaling.keys import ADDITIVE_METRICS, ENGINE_METRICS
from ..scaling.metadata import TriggerMetadata, parse_metadata
from ._scaledobject_options import ScaledObjectOptions, trigger_keys
from .promql import LabelNames, aggregate, engine_query, exact, per_gpu, series_for, workload_matchers
from .target import Target, check_regex

__all__ = ["external_trigger", "prometheus_trigger", "queue_trigger"]


def external_trigger(
    o: ScaledObjectOptions, md: TriggerMetadata, target: Target
) -> tuple[dict[str, Any], str]:
    if o.scaler_address:
        address = o.scaler_address
    elif md.scope == "node":
        address = f"{o.release}-agent.{o.release_namespace}.svc:6000"
    else:
        address = f"{o.release}-scaler.{o.release_namespace}.svc:6001"
    metadata: dict[str, str] = {"scalerAddress": address}
    if o.tls or o.tls_secret:
        metadata["enableTLS"] = "true"
    metadata.update(trigger_keys(o))
    metric_type = "AverageValue" if md.scope == "workload" else "Value"
    engine = md.metric in ENGINE_METRICS
    name = "engine" if engine else "gpu"
    trigger: dict[str, Any] = {"type": o.mode, "name": name, "metricType": metric_type, "metadata": metadata}
    if o.tls_secret:
        trigger["authenticationRef"] = {"name": f"{o.name or target.name}-gpuscale-tls"}
    if engine and md.metric in ADDITIVE_METRICS:
        why = (
            f"metricType AverageValue: the scaler reports {md.metric}, summed over the workload's pods (read "
            "on each node from the pod's engine), so the HPA computes "
            f"ceil(total / {md.target_value:g}), {md.target_value:g} per replica."
        )
    elif engine:
        why = (
            f"metricType AverageValue: the scaler reports the {md.aggregation} of {md.metric} over the "
            "workload's pods (read on each node from the pod's engine) times those pods, so the HPA computes "
            f"ceil(pods x {md.aggregation} / {md.target_value:g}), the classic per-replica rule."
        )
    elif md.scope == "workload":
        why = (
            "metricType AverageValue: in workload scope the scaler reports the aggregate times the pods with "
            f"GPU samples, so the HPA computes ceil(pods x {md.aggregation} / {md.target_value:g}), the "
            "classic per-replica rule."
        )
    else:
        why = (
            f"metricType Value: in {md.scope} scope the scaler reports the aggregate itself, and Value makes "
            f"the HPA compute ceil(ready pods x value / {md.target_value:g})."
        )
    if md.scope == "node":
        why += (
            " The address is the agents' headless Service: KEDA spreads its calls over every node, so node "
            "scope reads one node per call; use it with one GPU node, else the scaler."
        )
    if engine:
        why += (
            " The pods need the annotation gpuscale.io/metrics-port (their engine's metrics port, "
            "docs/engines.md); a pod whose engine cannot be read is a missing pod, never a 0."
        )
    return trigger, why


def prometheus_trigger(
    o: ScaledObjectOptions, md: TriggerMetadata, target: Target
) -> tuple[dict[str, Any], str, str]:
    if md.scope != "workload":
        raise UsageError(
            f'--scope "{md.scope}" needs --mode external: Prometheus has no node labels to select a pool '
            "and no single node to read"
        )
    if md.share != "gpu":
        raise UsageError('--share "container" needs --mode external')
    if o.vendor not in ("nvidia", "amd"):
        raise UsageError(f'--vendor "{o.vendor}" must be one of [amd, nvidia]')
    regex = check_regex(o.pod_regex) if o.pod_regex else target.pod_regex
    if md.metric in ENGINE_METRICS:
        return _engine_trigger(o, md, target, regex)
    labels = LabelNames(exported=o.exported_labels)
    job = f"{o.release}-agent" if o.agent_job is None else o.agent_job
    expr = per_gpu(
        series_for(o.vendor, md.metric),
        workload_matchers(o.namespace, regex, labels, job),
        md.window,
        scrape_interval=o.scrape_interval,
    )
    query = aggregate(md.aggregation, expr)
    additive = md.aggregation == "sum"
    metric_type = "AverageValue" if additive else "Value"
    metadata = _prometheus_metadata(o, md, query)
    trigger = {"type": "prometheus", "name": "gpu", "metricType": metric_type, "metadata": metadata}
    if additive:
        why = (
            "metricType AverageValue: the query sums over the workload's GPUs, an additive total, and "
            f"the HPA computes ceil(total / {md.target_value:g})."
        )
    else:
        why = (
            f"metricType Value, not KEDA's default AverageValue: the query returns the {md.aggregation} over "
            "the workload's GPUs, a per-replica figure. AverageValue would compute "
            f"ceil({md.aggregation} / {md.target_value:g}), which never passes 2 for a percentage whatever "
            f"the replicas; Value computes ceil(ready pods x {md.aggregation} / {md.target_value:g})."
        )
    pods = f'Pods are selected by name: {labels.pod}=~"{regex}"' + (
        " (--pod-regex)."
        if o.pod_regex
        else f" (the pods a {target.kind_name} names; --pod-regex to change)."
    )
    if o.exported_labels:
        pods += " Labels are exported_* because Prometheus scrapes the agent with honorLabels false."
    if job:
        pods += f" job=\"{job}\": the agents' series, not dcgm-exporter's of the same names (--agent-job)."
    return trigger, why, pods


def _prometheus_metadata(o: ScaledObjectOptions, md: TriggerMetadata, query: str) -> dict[str, str]:
    """A KEDA ``prometheus`` trigger's metadata for ``query`` at the trigger's thresholds."""
    metadata = {
        "serverAddress": o.prometheus_url,
        "query": query,
        "threshold": exact(md.target_value),
        "activationThreshold": exact(md.activation_value),
    }
    if o.min_replicas >= 1:
        # With pods running, an empty result means a lost target or broken labels: fail, not read 0.
        metadata["ignoreNullValues"] = "false"
    return metadata


def _engine_trigger(
    o: ScaledObjectOptions, md: TriggerMetadata, target: Target, regex: str
) -> tuple[dict[str, Any], str, str]:
    """The KEDA ``prometheus`` trigger users write today for an engine signal: vLLM's own series, scraped
    from the engine pods by Prometheus (30-60 s behind the node-local path)."""
    if o.exported_labels:
        raise UsageError(
            f'--exported-labels is for the agent\'s GPU series; metric "{md.metric}" is read from the engine '
            "pods' own series, whose namespace and pod are the scrape target's labels"
        )
    model = f',model_name="{md.model}"' if md.model else ""
    matchers = f'namespace="{o.namespace}",pod=~"{regex}"{model}'
    query, additive = engine_query(
        md.metric, matchers, md.window, aggregation=md.aggregation, scrape_interval=o.scrape_interval
    )
    metadata = _prometheus_metadata(o, md, query)
    trigger = {
        "type": "prometheus",
        "name": "engine",
        "metricType": "AverageValue" if additive else "Value",
        "metadata": metadata,
    }
    if additive:
        why = (
            f"metricType AverageValue: the query is a total over the workload's engines ({md.metric}), and "
            f"the HPA computes ceil(total / {md.target_value:g})."
        )
    else:
        why = (
            f"metricType Value: {md.metric} is a per-replica figure; the HPA computes "
            f"ceil(ready pods x value / {md.target_value:g})."
        )
    pods = (
        f'Pods are selected by name: pod=~"{regex}"; Prometheus must scrape the engine pods themselves (a '
        "PodMonitor on their metrics port), which the gpuscale agent does not need. Names match vllm:… and "
        "vllm_…: Prometheus 2.x stores vLLM's samples with an underscore (prometheus/client_python#1177)."
    )
    return trigger, why, pods


def queue_trigger(
    o: ScaledObjectOptions, md: TriggerMetadata, gpu: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """A second gpuscale trigger on the engine's waiting requests, beside the GPU one."""
    if o.mode == "prometheus" or md.scope != "workload":
        raise UsageError("--queue-target needs --mode external or external-push and scope workload")
    if md.metric in ENGINE_METRICS:
        given = f'profile "{md.profile}" sets metric' if o.metric is None and md.profile else "--metric is"
        raise UsageError(
            f'--queue-target goes with a GPU metric; {given} "{md.metric}" already '
            "(pick a GPU metric with --metric or --profile)"
        )
    metadata = {
        k: v for k, v in gpu["metadata"].items() if k in ("scalerAddress", "enableTLS", "podSelector")
    }
    metadata.update({"metric": "queue_length", "targetValue": o.queue_target, "window": "0"})
    try:
        parse_metadata(metadata, o.profiles)
    except MetadataError as e:
        raise UsageError(str(e).replace('parameter "targetValue"', "--queue-target")) from e
    queue: dict[str, Any] = {
        "type": o.mode,
        "name": "queue",
        "metricType": "AverageValue",
        "metadata": metadata,
    }
    if "authenticationRef" in gpu:
        queue["authenticationRef"] = gpu["authenticationRef"]
    why = (
        "Second trigger: the engine's waiting requests (queue_length, the sum over the workload's pods, "
        "read on the node; pods need the gpuscale.io/metrics-port annotation), "
        f"{o.queue_target} per replica. The HPA takes the larger of the two proposals: the queue leads "
        "when GPU utilization saturates at 100 %."
    )
    return queue, why
