"""Helpers of the deploy tests: Helm rendering through Helm's Go SDK (``helm-python-sdk``), schema checks with
``kubernetes-validate`` and KEDA's vendored CRDs, and a Prometheus Adapter template expander."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpuscale"
EXAMPLES = ROOT / "deploy" / "examples"
KEDA_SCHEMAS = ROOT / "tests" / "schemas" / "keda"
KUBE_VERSION = "1.33"
RELEASE, NAMESPACE = "gpuscale", "gpuscale"

# Kinds no Kubernetes schema covers: (apiVersion, kind) -> how they are checked instead.
KEDA_KINDS = {("keda.sh/v1alpha1", "ScaledObject"), ("keda.sh/v1alpha1", "TriggerAuthentication")}
NOT_IN_KUBERNETES = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("cert-manager.io/v1", "Certificate"),
    *KEDA_KINDS,
}


# The chart has no default image (nothing publishes one): the tests install one a user built and pushed.
IMAGE = "registry.example.com/platform/gpuscale"


def with_image(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``values`` with ``image.repository`` set to ``IMAGE`` unless they set it (a copy)."""
    out = dict(values or {})
    image = dict(out.get("image") or {})
    image.setdefault("repository", IMAGE)
    out["image"] = image
    return out


# The API a cluster with the Prometheus Operator serves (kube-prometheus-stack): the chart's ServiceMonitors and
# PrometheusRule need it (.Capabilities.APIVersions).
PROMETHEUS_OPERATOR = ("monitoring.coreos.com/v1",)


def render_chart(
    values: Mapping[str, Any] | None = None,
    *,
    image: bool = True,
    api_versions: Sequence[str] = PROMETHEUS_OPERATOR,
) -> dict[str, str]:
    """Template path → rendered text, as ``helm template --api-versions …`` with release gpuscale in
    namespace gpuscale; ``image``: with ``image.repository`` set (``with_image``) as every real install needs;
    ``api_versions``: the APIs the cluster serves beyond Kubernetes' own (default: the Prometheus
    Operator's)."""
    import json

    import helm_python as helm
    from helm_python import _native

    chart = helm.Chart.load(str(CHART))
    vals = with_image(values) if image else dict(values or {})
    # Chart.render has no api_versions; the SDK's own render call takes them (helm template --api-versions)
    options = {
        "name": RELEASE,
        "namespace": NAMESPACE,
        "is_install": True,
        "api_versions": list(api_versions),
    }
    rendered = _native.call_string("helm_render", chart._raw(), json.dumps(vals), json.dumps(options))
    manifests: dict[str, str] = json.loads(rendered)
    return manifests


def objects(manifests: Mapping[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".txt"):
            continue
        out.extend(d for d in yaml.safe_load_all(text) if d)
    return out


def find(objs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, (
        f"{len(matches)} {kind} {name or ''}: {[o['metadata']['name'] for o in matches]}"
    )
    return matches[0]


@functools.cache
def keda_schema(kind: str) -> dict[str, Any]:
    plural = {"ScaledObject": "scaledobjects", "TriggerAuthentication": "triggerauthentications"}[kind]
    crd = yaml.safe_load((KEDA_SCHEMAS / f"keda.sh_{plural}.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def validate(obj: dict[str, Any]) -> None:
    """Kubernetes' own schema (strict: unknown fields fail), or KEDA's CRD schema for KEDA kinds."""
    key = (obj["apiVersion"], obj["kind"])
    if key in KEDA_KINDS:
        jsonschema.validate(obj, keda_schema(obj["kind"]), cls=jsonschema.Draft7Validator)
        return
    if key in NOT_IN_KUBERNETES:
        return
    kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def validate_all(objs: Sequence[dict[str, Any]]) -> None:
    problems = []
    for o in objs:
        try:
            validate(o)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as e:
            problems.append(f"{o['kind']}/{o['metadata']['name']}: {e}")
    assert not problems, "\n".join(problems)


# --- Prometheus Adapter ---------------------------------------------------------------------------------
# What the adapter does with a rule's metricsQuery, after reference/hpa.md §3.2-3.3 (its docs/config.md and
# pkg/naming/metrics_query.go `Build`): a Go template with delimiters << >>, where
#   .Series        the series name;
#   .LabelMatchers the metric selector's requirements, then (namespaced) <namespace label>="<ns>", then
#                  <resource label>="<name>" for one object or <resource label>=~"a|b|c" for several,
#                  joined with ",";
#   .GroupBy       the resource label (the pod label for a Pods metric).
# The labels come from the rule's resources.overrides (label -> resource).

_FIELD = re.compile(r"<<\s*\.(\w+)\s*>>")


def expand_rule(
    rule: Mapping[str, Any], namespace: str, pods: Sequence[str], series: str | None = None
) -> str:
    """The PromQL the adapter runs for the HPA's pods ``pods`` in ``namespace``; ``series``: the name the
    adapter's discovery found (needed where ``seriesQuery`` selects by ``__name__=~``)."""
    overrides = rule["resources"]["overrides"]
    ns_label = next(label for label, r in overrides.items() if r["resource"] == "namespace")
    pod_label = next(label for label, r in overrides.items() if r["resource"] == "pod")
    series = series or rule["seriesQuery"].split("{", 1)[0]
    assert series, "the rule's seriesQuery has no plain series name: pass the series discovery found"
    pod_matcher = f'{pod_label}="{pods[0]}"' if len(pods) == 1 else f'{pod_label}=~"{"|".join(pods)}"'
    fields = {
        "Series": series,
        "LabelMatchers": f'{ns_label}="{namespace}",{pod_matcher}',
        "GroupBy": pod_label,
    }

    def sub(m: re.Match[str]) -> str:
        assert m[1] in fields, f"template field .{m[1]} is not expanded by this helper"
        return fields[m[1]]

    return _FIELD.sub(sub, rule["metricsQuery"])


def notes_scaledobject(notes: str) -> dict[str, Any]:
    """The example ScaledObject in the chart's NOTES.txt (the indented block from ``apiVersion: keda.sh``)."""
    lines = notes.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "apiVersion: keda.sh/v1alpha1")
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    block = lines[start:end]
    indent = len(block[0]) - len(block[0].lstrip())
    obj: dict[str, Any] = yaml.safe_load("\n".join(line[indent:] for line in block))
    return obj
