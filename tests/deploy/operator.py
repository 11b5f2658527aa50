"""The scrape config the Prometheus Operator makes of a ServiceMonitor endpoint, for a real Prometheus to run.

What the operator generates, after its ``pkg/prometheus/promcfg.go`` (``generateServiceMonitorConfig``) and
the configs it is tested against (``pkg/prometheus/testdata/*.golden``, e.g. ``GenerateRelabelConfig``):
``honor_labels`` from ``honorLabels``; then these target relabelings, in this order —

1. ``job`` → ``__tmp_prometheus_job_name``;
2. for each ``selector.matchLabels`` entry, keep targets whose Service has that label with that value
   (``__meta_kubernetes_service_label_<name>`` and ``..._labelpresent_<name>``, regex ``(value);true``);
3. keep the endpoint port named ``port``;
4. ``node`` or ``pod`` from the endpoint address's target kind and name;
5. ``namespace``, ``service``, ``pod``, ``container`` from the target's namespace, Service, pod and
   container; drop pods that are ``Failed`` or ``Succeeded``;
6. ``job`` = the Service's name; ``endpoint`` = the port's name;
7. the endpoint's own ``relabelings`` (camelCase fields to Prometheus's snake_case, actions lower-cased);
8. sharding (``hashmod`` over ``__address__``; one shard keeps every target: left out here);

and ``metricRelabelings`` as ``metric_relabel_configs``. Kubernetes service discovery is replaced by
``static_configs`` carrying the same ``__meta_kubernetes_*`` labels it would give each target.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Target", "scrape_config"]

_FIELDS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}


def _sanitize(name: str) -> str:
    """A Kubernetes label name as service discovery writes it into a meta label name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


@dataclass(frozen=True)
class Target:
    """One endpoint address of the Service: a pod of ``service`` in ``namespace`` on ``node``."""

    address: str
    namespace: str
    service: str
    service_labels: Mapping[str, str]
    pod: str
    container: str
    node: str
    port_name: str = "metrics"
    phase: str = "Running"
    extra: Mapping[str, str] = field(default_factory=dict)

    def meta_labels(self) -> dict[str, str]:
        labels = {
            "__meta_kubernetes_namespace": self.namespace,
            "__meta_kubernetes_service_name": self.service,
            "__meta_kubernetes_endpoint_port_name": self.port_name,
            "__meta_kubernetes_endpoint_address_target_kind": "Pod",
            "__meta_kubernetes_endpoint_address_target_name": self.pod,
            "__meta_kubernetes_pod_name": self.pod,
            "__meta_kubernetes_pod_container_name": self.container,
            "__meta_kubernetes_pod_node_name": self.node,
            "__meta_kubernetes_pod_phase": self.phase,
        }
        for k, v in self.service_labels.items():
            labels[f"__meta_kubernetes_service_label_{_sanitize(k)}"] = v
            labels[f"__meta_kubernetes_service_labelpresent_{_sanitize(k)}"] = "true"
        labels.update(self.extra)
        return labels


def _relabel(r: Mapping[str, Any]) -> dict[str, Any]:
    out = {_FIELDS[k]: v for k, v in r.items()}
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def scrape_config(
    service_monitor: Mapping[str, Any], targets: Sequence[Target], *, index: int = 0, interval: str = "1s"
) -> dict[str, Any]:
    """The scrape config of endpoint ``index`` of ``service_monitor`` over ``targets`` (its ``interval`` is
    replaced by ``interval``, so that a test need not wait 15 s a scrape)."""
    meta = service_monitor["metadata"]
    spec = service_monitor["spec"]
    ep = spec["endpoints"][index]
    relabel: list[dict[str, Any]] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for k, v in sorted(spec["selector"].get("matchLabels", {}).items()):
        relabel.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_service_label_{_sanitize(k)}",
                    f"__meta_kubernetes_service_labelpresent_{_sanitize(k)}",
                ],
                "regex": f"({v});true",
            }
        )
    relabel.append(
        {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": ep["port"]}
    )
    kind = [
        "__meta_kubernetes_endpoint_address_target_kind",
        "__meta_kubernetes_endpoint_address_target_name",
    ]
    relabel += [
        {
            "source_labels": kind,
            "separator": ";",
            "regex": "Node;(.*)",
            "replacement": "${1}",
            "target_label": "node",
        },
        {
            "source_labels": kind,
            "separator": ";",
            "regex": "Pod;(.*)",
            "replacement": "${1}",
            "target_label": "pod",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": ep["port"]},
    ]
    relabel += [_relabel(r) for r in ep.get("relabelings", [])]
    config: dict[str, Any] = {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
        "honor_labels": bool(ep.get("honorLabels", False)),
        "scrape_interval": interval,
        "metrics_path": ep.get("path", "/metrics"),
        "static_configs": [{"targets": [t.address], "labels": t.meta_labels()} for t in targets],
        "relabel_configs": relabel,
    }
    if ep.get("metricRelabelings"):
        config["metric_relabel_configs"] = [_relabel(r) for r in ep["metricRelabelings"]]
    return config
