"""KEDA ScaledObjects for the three paths: ``external`` / ``external-push`` (the gpuscale scaler or, in node
scope, an agent) and ``prometheus`` (KEDA's Prometheus scaler over the agent's series).

**metricType.** KEDA's default ``AverageValue`` makes the HPA compute ``ceil(value / target)``; ``Value``
makes it compute ``ceil(readyPods x value / target)``.

- external, scope workload: the scaler reports the aggregate x the workload's pods with GPU samples, so the
  default ``AverageValue`` gives the HPA's classic ``ceil(pods x aggregate / target)``.
- external, scope node or pool: the scaler reports the aggregate itself → ``Value``.
- prometheus: the query returns the aggregate (e.g. ``avg`` utilization of the workload's GPUs). With
  ``AverageValue`` the HPA would compute ``ceil(avg / target)``, at most 2 for a percentage, whatever the
  replicas (the AverageValue trap) → ``Value``. Only ``sum`` is additive over pods → ``AverageValue``.

**behavior** (``gpuscale.render.behavior``): a demand trigger (an engine metric, ``--queue-target``, a
request path) gets a scale-up that reaches the asked count in one HPA sync and a longer scale-down window.

**The request path** (``--request-path``…) is trigger metadata the gpuscale scaler reads: only the external
modes carry it; KEDA's ``prometheus`` trigger reads nothing but its query.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from ..errors import UsageError
from ..netaddr import parse_host_port
from ..scaling.errors import MetadataError
from ..scaling.keys import ADDITIVE_METRICS, ENGINE_METRICS
from ..scaling.metadata import TriggerMetadata, parse_metadata
from ..scaling.profiles import ProfileSet
from ._bounds import INT32_MAX, check_ints, check_url
from ._yaml import Document, dump
from .behavior import check, choose
from .promql import (
    DEFAULT_SCRAPE_INTERVAL,
    LabelNames,
    aggregate,
    engine_query,
    exact,
    per_gpu,
    series_for,
    workload_matchers,
)
from .target import Target, check_name, check_namespace, check_regex, parse_target

__all__ = ["MODES", "ScaledObjectOptions", "render_scaledobject", "scaledobject_documents"]

Mode = Literal["external", "external-push", "prometheus"]
MODES: tuple[Mode, ...] = ("external", "external-push", "prometheus")
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuscale-render"}


# KEDA's fallback behaviours (ScaledObject spec.fallback.behavior, KEDA 2.15+)
FALLBACK_BEHAVIORS = ("static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower")
# What each does to a running workload, as the render comment says it (KEDA's pkg/fallback/fallback.go):
# the default, currentReplicasIfHigher, never scales a workload down while monitoring is broken
_FALLBACK_SAYS = {
    "currentReplicasIfHigher": "the larger of the replicas running now and {n}: it never scales the workload "
    "down",
    "currentReplicas": "the replicas running now ({n} is not used): it never scales the workload down, "
    "nor up",
    "static": "exactly {n}: a workload running more is SCALED DOWN to {n} while monitoring is broken",
    "currentReplicasIfLower": "the smaller of the replicas running now and {n}: a workload running more is "
    "SCALED DOWN to {n} while monitoring is broken",
}


@dataclass(frozen=True, slots=True)
class ScaledObjectOptions:
    """What ``gpuscale render scaledobject`` takes; every field but ``target``/``namespace`` has a default."""

    target: str
    namespace: str
    mode: Mode = "external"
    name: str | None = None
    profile: str | None = "llm-serving"
    metric: str | None = None
    aggregation: str | None = None
    target_value: str | None = None
    activation_value: str | None = None
    window: str | None = None
    scope: str | None = None
    share: str | None = None
    pod_selector: str | None = None
    node_selector: str | None = None
    stale_after: str | None = None
    min_replicas: int = 1
    max_replicas: int = 10
    polling_interval: int = 15
    cooldown_period: int = 300
    # The HPA's behavior (None: by the trigger, gpuscale.render.behavior): scale-up fast or default, and
    # the scale-down window in seconds
    scale_up: str | None = None
    scale_down_stabilization: int | None = None
    # The request path in front of the workload (external / external-push): trigger metadata, as text
    request_path: str | None = None
    request_path_format: str | None = None
    request_path_match: str | None = None
    replica_rate: str | None = None
    # external / external-push
    scaler_address: str | None = None
    release: str = "gpuscale"
    release_namespace: str = "gpuscale"
    tls: bool = False
    tls_secret: str | None = None
    tls_client_cert: bool = False
    # prometheus
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    pod_regex: str | None = None
    exported_labels: bool = False
    # Prometheus's job of the agents' series (None: <release>-agent, as the chart's ServiceMonitor names it;
    # "": not pinned), so that dcgm-exporter's series of the same names are not counted too.
    agent_job: str | None = None
    vendor: str = "nvidia"
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL  # Prometheus's, of the agents: ranges are >= 2 of it
    # Profiles beyond the built-in ones (the scaler's --profiles file), to check --profile against.
    profiles: ProfileSet | None = None
    # KEDA's fallback: after this many failed polls in a row, hold this many replicas (None: no fallback)
    fallback_replicas: int | None = None
    fallback_failure_threshold: int = 3
    fallback_behavior: str = "currentReplicasIfHigher"
    # external: a second trigger on the engine's waiting requests (queue_length), this many per replica
    queue_target: str | None = None
    # The command that wrote it, for the "Generated by" comment (None: the base command, from the options)
    command: str | None = None


def _metadata(o: ScaledObjectOptions) -> dict[str, str]:
    """The gpuscale trigger keys the user chose (the profile fills the rest, in the scaler)."""
    keys = {
        "profile": o.profile,
        "metric": o.metric,
        "aggregation": o.aggregation,
        "targetValue": o.target_value,
        "activationValue": o.activation_value,
        "window": o.window,
        "scope": o.scope,
        "share": o.share,
        "podSelector": o.pod_selector,
        "nodeSelector": o.node_selector,
        "staleAfter": o.stale_after,
        "requestPath": o.request_path,
        "requestPathFormat": o.request_path_format,
        "requestPathMatch": o.request_path_match,
        "replicaRate": o.replica_rate,
    }
    return {k: v for k, v in keys.items() if v is not None}


def _request_path_flags(o: ScaledObjectOptions) -> list[tuple[str, str]]:
    """The request-path flags given, as ``(flag, value)``."""
    flags = (
        ("--request-path", o.request_path),
        ("--request-path-format", o.request_path_format),
        ("--request-path-match", o.request_path_match),
        ("--replica-rate", o.replica_rate),
    )
    return [(flag, value) for flag, value in flags if value is not None]


def resolve(o: ScaledObjectOptions) -> TriggerMetadata:
    """The trigger as the scaler will read it; bad values fail here with the scaler's own messages."""
    keys = _metadata(o)
    # In the prometheus path a sum is fine (metricType AverageValue divides it by the replicas); the
    # scaler refuses it only in its own workload scope, whose value is already multiplied by the pods.
    prometheus_sum = o.mode == "prometheus" and keys.get("aggregation") == "sum"
    if prometheus_sum:
        keys["aggregation"] = "max"
    try:
        md = parse_metadata(keys, o.profiles)
    except MetadataError as e:
        raise UsageError(str(e)) from e
    return replace(md, aggregation="sum") if prometheus_sum else md


def _check_common(o: ScaledObjectOptions) -> None:
    if o.mode not in MODES:
        raise UsageError(f'--mode "{o.mode}" must be one of [{", ".join(MODES)}]')
    check_namespace(o.namespace)
    if o.min_replicas < 0:
        raise UsageError(f'--min-replicas "{o.min_replicas}" must be at least 0')
    if o.max_replicas < max(1, o.min_replicas):
        raise UsageError(
            f'--max-replicas "{o.max_replicas}" must be at least 1 and at least '
            f"--min-replicas ({o.min_replicas})"
        )
    check_ints(
        [
            ("--max-replicas", o.max_replicas, 1, INT32_MAX),
            ("--polling-interval", o.polling_interval, 1, INT32_MAX),
            ("--cooldown-period", o.cooldown_period, 0, INT32_MAX),
            ("--fallback-failure-threshold", o.fallback_failure_threshold, 1, INT32_MAX),
        ]
    )
    if o.fallback_replicas is not None and not o.min_replicas <= o.fallback_replicas <= o.max_replicas:
        raise UsageError(
            f'--fallback-replicas "{o.fallback_replicas}" must be between --min-replicas ({o.min_replicas}) '
            f"and --max-replicas ({o.max_replicas})"
        )
    if o.fallback_behavior not in FALLBACK_BEHAVIORS:
        raise UsageError(
            f'--fallback-behavior "{o.fallback_behavior}" must be one of [{", ".join(FALLBACK_BEHAVIORS)}]'
        )
    check(o.scale_up, o.scale_down_stabilization)
    if o.mode == "prometheus" and (o.tls or o.tls_secret or o.tls_client_cert):
        raise UsageError("--tls, --tls-secret and --tls-client-cert are for --mode external or external-push")
    path_flags = _request_path_flags(o)
    if o.mode == "prometheus" and path_flags:
        flag, value = path_flags[0]
        raise UsageError(
            f'{flag} "{value}" is for --mode external or external-push: the gpuscale scaler reads the '
            "request path; KEDA's prometheus trigger reads only its query"
        )
    if o.tls_client_cert and not o.tls_secret:
        raise UsageError("--tls-client-cert needs --tls-secret (the Secret holding tls.crt and tls.key)")
    if o.scaler_address:
        parse_host_port(o.scaler_address, "--scaler-address")
    check_url(o.prometheus_url, "--prometheus-url")


def _comment_metadata(md: TriggerMetadata) -> str:
    src = f'profile "{md.profile}": ' if md.profile else ""
    how = "summed over the pods" if md.metric in ADDITIVE_METRICS else f"aggregation {md.aggregation}"
    return (
        f"Trigger as the scaler reads it ({src}metric {md.metric}, {how}, "
        f"targetValue {md.target_value:g}, activationValue {md.activation_value:g}, window {md.window:g}s, "
        f"scope {md.scope}{_decisions(md)})."
    )


def _decisions(md: TriggerMetadata) -> str:
    out = ""
    if md.kv_cache_guard is not None:
        out += f", kvCacheGuard {md.kv_cache_guard:g}"
    if md.scale_ahead != "off":
        out += f", scaleAhead {md.scale_ahead}"
    if md.engine_demand is not None:
        out += f", engineDemand {md.engine_demand}"
    if md.request_path is not None:
        match = f", match {md.request_path_match}" if md.request_path_match else ""
        out += f", requestPath {md.request_path} ({md.request_path_format}{match})"
        if md.replica_rate is not None:
            out += f", replicaRate {md.replica_rate:g}"
    return out


def _external_trigger(
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
    metadata.update(_metadata(o))
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


def _prometheus_trigger(
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


def _queue_trigger(
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


def scaledobject_documents(o: ScaledObjectOptions) -> list[Document]:
    """The ScaledObject (and, with ``tls_secret``, its TriggerAuthentication) as ``(comment, object)``."""
    _check_common(o)
    target = parse_target(o.target)
    md = resolve(o)
    name = o.name or target.name
    if o.name:
        check_name(o.name)
    base = f"gpuscale render scaledobject --target {o.target} --namespace {o.namespace} --mode {o.mode}"
    comment = [
        f"Generated by: {o.command or base}",
        _comment_metadata(md),
    ]
    if o.mode == "prometheus":
        trigger, why, pods = _prometheus_trigger(o, md, target)
        comment += [why, pods]
    else:
        trigger, why = _external_trigger(o, md, target)
        comment.append(why)
        if o.mode == "external-push":
            comment.append(
                "external-push: the scaler pushes activity at once (StreamIsActive) to wake the target "
                "from zero; KEDA still polls every pollingInterval and scales to zero only by polling."
            )
    if o.min_replicas == 0 and md.request_path is not None:
        comment.append(_wakes(md))
    elif o.min_replicas == 0:
        what = "engine" if md.metric in ENGINE_METRICS else "GPU"
        comment.append(
            f"minReplicaCount 0: {what} metrics of a workload with no pods are empty, so this trigger alone "
            "never wakes it; add a trigger that sees demand (a queue, requests)."
        )
    demand = md.metric in ENGINE_METRICS or o.queue_target is not None or md.request_path is not None
    behavior = choose(o.scale_up, o.scale_down_stabilization, max_replicas=o.max_replicas, demand=demand)
    spec: dict[str, Any] = {
        "scaleTargetRef": target.ref(),
        "pollingInterval": o.polling_interval,
        "cooldownPeriod": o.cooldown_period,
        "minReplicaCount": o.min_replicas,
        "maxReplicaCount": o.max_replicas,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior.spec()}},
        "triggers": [trigger],
    }
    if o.queue_target is not None:
        queue, why = _queue_trigger(o, md, trigger)
        spec["triggers"].append(queue)
        comment.append(why)
    if o.fallback_replicas is not None:
        fallback: dict[str, Any] = {
            "failureThreshold": o.fallback_failure_threshold,
            "replicas": o.fallback_replicas,
            "behavior": o.fallback_behavior,
        }
        spec["fallback"] = fallback
        comment.append(
            f"fallback: after {o.fallback_failure_threshold} failed polls in a row (gpuscale answers "
            "UNAVAILABLE when the workload's GPU or engine data is stale or missing, never a made-up 0) KEDA "
            f"asks for, until the trigger answers again ({o.fallback_behavior}), "
            f"{_FALLBACK_SAYS[o.fallback_behavior].format(n=o.fallback_replicas)}. It counts only failed "
            "GetMetrics: a scaler that cannot be reached at all fails GetMetricSpec first and the fallback "
            "never starts (kedacore/keda#8056); the HPA then keeps the current replicas."
        )
    comment.extend(behavior.says())
    so = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": o.namespace, "labels": dict(MANAGED_BY)},
        "spec": spec,
    }
    generated, *said = comment  # the command on one line, to copy as it is
    docs: list[Document] = [("\n".join([generated, *(_wrap(c) for c in said)]), so)]
    if o.tls_secret:
        docs.insert(0, _trigger_auth(o, name))
    return docs


def _wakes(md: TriggerMetadata) -> str:
    """The comment on a workload at zero replicas whose trigger reads a request path."""
    if md.replica_rate is not None:
        asks = f"ceil(demand / {md.replica_rate:g}) replicas (replicaRate)"
    elif md.metric == "request_rate":
        asks = f"ceil(demand / {md.target_value:g}) replicas (targetValue of request_rate)"
    else:
        asks = (
            "one replica until the scaler has learned what a replica serves (while requests wait), then "
            "ceil(demand / that); --replica-rate says it from the start"
        )
    return (
        f"minReplicaCount 0: the request path (Service {md.request_path}, {md.request_path_format}) counts "
        f"the requests that arrive with no pod to take them, so it wakes the workload and asks for {asks}."
    )


def _trigger_auth(o: ScaledObjectOptions, name: str) -> Document:
    params = [{"parameter": "caCert", "name": o.tls_secret, "key": "ca.crt"}]
    if o.tls_client_cert:
        params += [
            {"parameter": "tlsClientCert", "name": o.tls_secret, "key": "tls.crt"},
            {"parameter": "tlsClientKey", "name": o.tls_secret, "key": "tls.key"},
        ]
    comment = (
        f"KEDA reads the scaler's CA (and its client certificate) as PEM from Secret {o.tls_secret} in "
        f"namespace {o.namespace}, the ScaledObject's namespace: copy it there."
    )
    obj = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": f"{name}-gpuscale-tls", "namespace": o.namespace, "labels": dict(MANAGED_BY)},
        "spec": {"secretTargetRef": params},
    }
    return comment, obj


def _wrap(text: str, width: int = 108) -> str:
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(lines)


def render_scaledobject(o: ScaledObjectOptions) -> str:
    """YAML text: ``kubectl apply -f -`` ready."""
    return dump(scaledobject_documents(o))
