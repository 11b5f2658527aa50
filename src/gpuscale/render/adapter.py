"""The Prometheus Adapter path: an ``autoscaling/v2`` HPA with a ``Pods`` metric, and the adapter rule that
serves that metric from the agent's series (``custom.metrics.k8s.io``).

How the adapter answers (its ``docs/config.md`` and ``pkg/naming/metrics_query.go``): for the HPA's pods it
lists their names, expands the rule's ``metricsQuery`` Go template (delimiters ``<< >>``) with ``.Series``
(the series name), ``.LabelMatchers`` (``<namespace label>="ns",<pod label>=~"p1|p2"``) and ``.GroupBy``
(the pod label), runs it at ``now``, and matches each returned series to a pod by the pod label. So the query
keeps that label: ``avg by (<<.GroupBy>>) (…)`` gives one value per pod over the pod's GPUs.

The HPA's ``AverageValue`` target on a ``Pods`` metric is per pod: the HPA computes
``ceil(sum of the pods' values / target)`` = ``ceil(pods x average / target)``.

The rule is written as values of the prometheus-community ``prometheus-adapter`` chart (``rules.custom``),
to merge into the adapter's release: the adapter reads one config file, and a ConfigMap of it that
``kubectl apply`` would put in place replaces every rule the adapter had. That ConfigMap is written only when
asked for by name (``adapter_configmap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..scaling.errors import MetadataError
from ..scaling.keys import ADDITIVE_METRICS, ENGINE_METRICS
from ..scaling.metadata import TriggerMetadata, parse_metadata
from ..scaling.profiles import ProfileSet
from ._yaml import Document, dump
from .promql import (
    DEFAULT_SCRAPE_INTERVAL,
    LabelNames,
    aggregate,
    engine_per_pod_query,
    engine_series,
    exact,
    job_matcher,
    per_gpu,
    range_seconds,
    series_for,
    vllm_name_regex,
    vllm_selector,
)
from .target import check_name, check_namespace, parse_target

__all__ = [
    "HpaOptions",
    "adapter_rule",
    "adapter_values",
    "hpa_documents",
    "render_adapter_values",
    "render_hpa",
]


@dataclass(frozen=True, slots=True)
class HpaOptions:
    target: str
    namespace: str
    name: str | None = None
    profile: str | None = "llm-serving"
    metric: str | None = None
    aggregation: str | None = None
    target_value: str | None = None
    window: str | None = None
    min_replicas: int = 1
    max_replicas: int = 10
    scale_down_stabilization: int = 300
    exported_labels: bool = False
    vendor: str = "nvidia"
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL  # Prometheus's, of the agents: ranges are >= 2 of it
    # Prometheus's job of the agents' series ("": not pinned); the chart's ServiceMonitor names it so.
    agent_job: str = "gpuscale-agent"
    adapter_namespace: str = "monitoring"
    # The adapter's whole config as a ConfigMap of this name, in the manifests (replaces every rule it had).
    adapter_configmap: str | None = None
    profiles: ProfileSet | None = None


def _resolve(o: HpaOptions) -> TriggerMetadata:
    keys = {
        "profile": o.profile,
        "metric": o.metric,
        "aggregation": o.aggregation,
        "targetValue": o.target_value,
        "window": o.window,
    }
    try:
        md = parse_metadata({k: v for k, v in keys.items() if v is not None}, o.profiles)
    except MetadataError as e:
        raise UsageError(str(e)) from e
    if o.vendor not in ("nvidia", "amd"):
        raise UsageError(f'--vendor "{o.vendor}" must be one of [amd, nvidia]')
    if md.metric in ENGINE_METRICS and o.exported_labels:
        raise UsageError(
            f'--exported-labels is for the agent\'s GPU series; metric "{md.metric}" is read from the engine '
            "pods' own series, whose namespace and pod are the scrape target's labels"
        )
    return md


def _window_words(window: float, scrape_interval: float) -> str:
    if window <= 0:
        return "newest samples"
    span = range_seconds(window, scrape_interval)
    if span > window:
        return f"{span:g}s averages: window {window:g}s, at least two {scrape_interval:g}s scrapes"
    return f"{span:g}s averages"


def metric_name(md: TriggerMetadata) -> str:
    """The custom metric's name in ``custom.metrics.k8s.io``, e.g. ``gpuscale_gpu_utilization_avg``; an
    engine metric's has no aggregation (``gpuscale_queue_length``): its per-pod figure is fixed."""
    if md.metric in ENGINE_METRICS:
        return f"gpuscale_{md.metric}"
    return f"gpuscale_{md.metric}_{md.aggregation}"


def adapter_rule(
    md: TriggerMetadata,
    *,
    exported: bool = False,
    vendor: str = "nvidia",
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL,
    job: str | None = None,
) -> dict[str, Any]:
    """One ``rules:`` entry of the adapter's config: per-pod ``aggregation`` over the pod's GPUs; ``job``
    pins the agents' series (dcgm-exporter's have the same names)."""
    if md.metric in ENGINE_METRICS:
        return _engine_rule(md, scrape_interval)
    labels = LabelNames(exported=exported)
    series = series_for(vendor, md.metric)
    matchers = "<<.LabelMatchers>>" + (f",{job_matcher(job).rstrip(',')}" if job else "")
    expr = per_gpu(series, matchers, md.window, name="<<.Series>>", scrape_interval=scrape_interval)
    return {
        "seriesQuery": f'{series.name}{{{job_matcher(job)}{labels.namespace}!="",{labels.pod}!=""}}',
        # Only overrides, no template: with exported labels the exporter pod's own namespace/pod labels
        # must not map to resources.
        "resources": {
            "overrides": {
                labels.namespace: {"resource": "namespace"},
                labels.pod: {"resource": "pod"},
            }
        },
        "name": {"matches": f"^{series.name}$", "as": metric_name(md)},
        "metricsQuery": aggregate(md.aggregation, expr, by="<<.GroupBy>>"),
    }


def _engine_rule(md: TriggerMetadata, scrape_interval: float) -> dict[str, Any]:
    """The rule for an engine metric: vLLM's own series, scraped by Prometheus from the engine pods (their
    namespace and pod are the scrape target's labels; no job pin: the agents serve no vllm:* series)."""
    name = engine_series(md.metric)
    model = f',model_name="{md.model}"' if md.model else ""
    query = engine_per_pod_query(
        md.metric,
        f"<<.LabelMatchers>>{model}",
        md.window,
        name="<<.Series>>",
        scrape_interval=scrape_interval,
    )
    return {
        "seriesQuery": vllm_selector(name, 'namespace!="",pod!=""'),
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{vllm_name_regex(name)}$", "as": metric_name(md)},
        "metricsQuery": query,
    }


def _per_pod_words(md: TriggerMetadata, scrape_interval: float) -> str:
    if md.metric in ADDITIVE_METRICS:
        return f"per pod, its engine's {md.metric} (its models added up), from vLLM's series"
    if md.metric in ENGINE_METRICS:
        return f"per pod, its engine's {md.metric}, from vLLM's series"
    return (
        f"per pod, the {md.aggregation} of {md.metric} over the pod's GPUs "
        f"({_window_words(md.window, scrape_interval)})"
    )


def _quantity(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{round(value * 1000)}m"


def hpa_documents(o: HpaOptions) -> list[Document]:
    check_namespace(o.namespace)
    check_namespace(o.adapter_namespace, "--adapter-namespace")
    if o.adapter_configmap is not None:
        check_name(o.adapter_configmap, "--adapter-configmap")
    if o.name:
        check_name(o.name)
    if o.min_replicas < 1:
        raise UsageError(
            f'--min-replicas "{o.min_replicas}" must be at least 1 (an HPA cannot scale to zero)'
        )
    if o.max_replicas < o.min_replicas:
        raise UsageError(
            f'--max-replicas "{o.max_replicas}" must be at least --min-replicas ({o.min_replicas})'
        )
    target = parse_target(o.target)
    md = _resolve(o)
    rule = adapter_rule(
        md, exported=o.exported_labels, vendor=o.vendor, scrape_interval=o.scrape_interval, job=o.agent_job
    )
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": o.name or target.name,
            "namespace": o.namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpuscale-render"},
        },
        "spec": {
            "scaleTargetRef": target.ref(),
            "minReplicas": o.min_replicas,
            "maxReplicas": o.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric_name(md)},
                        "target": {"type": "AverageValue", "averageValue": _quantity(md.target_value)},
                    },
                }
            ],
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": o.scale_down_stabilization,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                }
            },
        },
    }
    hpa_comment = (
        f"Generated by: gpuscale render hpa --target {o.target} --namespace {o.namespace}\n"
        f"{metric_name(md)}: {_per_pod_words(md, o.scrape_interval)}, served by Prometheus Adapter.\n"
        f"AverageValue on a Pods metric is per pod: desired = ceil(sum over pods / {exact(md.target_value)})."
    )
    docs: list[Document] = [(hpa_comment, hpa)]
    if o.adapter_configmap is not None:
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": o.adapter_configmap, "namespace": o.adapter_namespace},
            "data": {"config.yaml": dump_rules([rule])},
        }
        cm_comment = (
            "Prometheus Adapter's whole --config file, asked for by name (--adapter-configmap). Applying it\n"
            "REPLACES every rule the adapter has: merge them in first. With the prometheus-community\n"
            "chart, use the values instead (--adapter without --adapter-configmap). Keep\n"
            "--metrics-relist-interval (1m in the chart) at least the scrape interval. Only one\n"
            "external-metrics API can exist (KEDA's, if installed); this rule serves a custom metric, so\n"
            "both can run."
        )
        docs.append((cm_comment, cm))
    return docs


def adapter_values(o: HpaOptions, *, file_name: str = "VALUES.yaml") -> Document:
    """The rule as values of the prometheus-community/prometheus-adapter chart, ``rules.custom``, with a
    comment that says how to merge them (``file_name``: how the comment names this file)."""
    hpa_documents(o)  # the same checks
    md = _resolve(o)
    rule = adapter_rule(
        md, exported=o.exported_labels, vendor=o.vendor, scrape_interval=o.scrape_interval, job=o.agent_job
    )
    comment = (
        "Values for the prometheus-community/prometheus-adapter chart: the rule that serves\n"
        f"{metric_name(md)} to the HPA of `gpuscale render hpa --target {o.target} "
        f"--namespace {o.namespace}`.\n"
        "rules.custom is a list, and Helm replaces a list rather than merging it: if your adapter release\n"
        "has custom rules, add this entry to them; if not, add these values to the release's:\n"
        "  helm upgrade prometheus-adapter prometheus-community/prometheus-adapter "
        f"-n {o.adapter_namespace} --reuse-values -f {file_name}\n"
        "The metric appears after the adapter's next relist (metricsRelistInterval, 1m in the chart)."
    )
    return comment, {"rules": {"custom": [rule]}}


def render_adapter_values(o: HpaOptions, *, file_name: str = "VALUES.yaml") -> str:
    comment, values = adapter_values(o, file_name=file_name)
    return dump([(comment, values)])


def dump_rules(rules: list[dict[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump({"rules": rules}, sort_keys=False, width=200)


def render_hpa(o: HpaOptions) -> str:
    return dump(hpa_documents(o))
