"""The objects of the demo's local API server, as the real API server writes them: a Pod (``make_pod``), a
kubeconfig pointing at the server (``write_kubeconfig``), a ``metav1.LabelSelector`` in its string form
(``format_label_selector``); the label and field selectors requests are filtered by (``match_labels``, by the
scaler's own parser, so the server refuses what the real one would); a ResourceSlice in each version of
``resource.k8s.io`` it is served in; and the API resources discovery lists.

Private to ``apiserver``, which re-exports the public names.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..scaling.selector import LabelSelector, parse_selector

__all__ = [
    "BUILTIN_RESOURCES",
    "DRA_GROUP",
    "KINDS",
    "Obj",
    "dra_version_of",
    "field_of",
    "format_label_selector",
    "make_pod",
    "match_labels",
    "parse_field_selector",
    "scale_of",
    "write_kubeconfig",
]

Obj = dict[str, Any]

KINDS = {  # lists and watches
    "pods": "Pod",
    "nodes": "Node",
    "resourceslices": "ResourceSlice",
    "endpointslices": "EndpointSlice",
}
DRA_GROUP = "resource.k8s.io"


BUILTIN_RESOURCES: dict[str, list[Obj]] = {
    "v1": [
        {
            "name": "pods",
            "singularName": "pod",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["get", "list", "watch"],
        },
        {
            "name": "nodes",
            "singularName": "node",
            "namespaced": False,
            "kind": "Node",
            "verbs": ["get", "list", "watch"],
        },
    ],
    "apps/v1": [
        {"name": p, "singularName": p[:-1], "namespaced": True, "kind": k, "verbs": ["get", "list", "watch"]}
        for p, k in (
            ("deployments", "Deployment"),
            ("statefulsets", "StatefulSet"),
            ("replicasets", "ReplicaSet"),
        )
    ]
    + [
        {
            "name": f"{p}/scale",
            "singularName": "",
            "namespaced": True,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }
        for p in ("deployments", "statefulsets", "replicasets")
    ],
    "keda.sh/v1alpha1": [
        {
            "name": "scaledobjects",
            "singularName": "scaledobject",
            "namespaced": True,
            "kind": "ScaledObject",
            "verbs": ["get", "list", "watch"],
        },
    ],
    # resource.k8s.io: ResourceSlices, stored in the v1 form (``dra_version_of`` serves the others)
    f"{DRA_GROUP}/v1": [
        {
            "name": "resourceslices",
            "singularName": "resourceslice",
            "namespaced": False,
            "kind": "ResourceSlice",
            "verbs": ["get", "list", "watch"],
        }
    ],
}


def make_pod(
    namespace: str,
    name: str,
    *,
    node: str,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    containers: Mapping[str, str | None] | None = None,
    phase: str = "Running",
    ready: bool | None = None,
    limits: Mapping[str, str] | None = None,
    resource_claims: Iterable[str] = (),
    annotations: Mapping[str, str] | None = None,
    ip: str | None = None,
    created_at: float | None = None,
    scheduled_at: float | None = None,
    ready_at: float | None = None,
) -> Obj:
    """A Pod as the API server returns it. ``containers`` maps names to ``containerID`` (``containerd://…``;
    ``None``: not started yet, so no id). ``ready`` (default: every container started) sets the containers'
    ``ready`` and the pod's ``Ready`` condition. ``limits`` (``{"nvidia.com/gpu": "1"}``) go on every
    container; ``resource_claims`` name the pod's ResourceClaims (DRA); ``annotations`` and ``ip``
    (``status.podIP``) are what an engine scrape is found by. ``created_at``, ``scheduled_at`` and
    ``ready_at`` (Unix seconds) are its ``creationTimestamp`` (default 2025-01-01T00:00:00Z) and the
    ``lastTransitionTime`` of its ``PodScheduled`` and ``Ready`` conditions (default: its creation): what its
    cold start is read from."""
    containers = {"main": None} if containers is None else containers
    created = _rfc3339(created_at) if created_at is not None else "2025-01-01T00:00:00Z"
    statuses = _container_statuses(containers, ready)
    all_ready = bool(statuses) and all(st["ready"] for st in statuses)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuidlib.uuid4()),
            "labels": dict(labels or {}),
            **({"annotations": dict(annotations)} if annotations else {}),
            "creationTimestamp": created,
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": c, "image": "busybox", **({"resources": {"limits": dict(limits)}} if limits else {})}
                for c in containers
            ],
            **(
                {"resourceClaims": [{"name": n, "resourceClaimName": n} for n in resource_claims]}
                if resource_claims
                else {}
            ),
        },
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": _rfc3339(scheduled_at) if scheduled_at is not None else created,
                },
                {
                    "type": "Ready",
                    "status": "True" if all_ready else "False",
                    "lastTransitionTime": _rfc3339(ready_at) if ready_at is not None else created,
                },
            ],
            "containerStatuses": statuses,
            **({"podIP": ip} if ip else {}),
        },
    }


def _container_statuses(containers: Mapping[str, str | None], ready: bool | None) -> list[Obj]:
    """``status.containerStatuses``: a container with an id runs, one without is being created; each is
    ``ready`` (default: started)."""
    statuses = []
    for cname, cid in containers.items():
        started = ready if ready is not None else cid is not None
        status: Obj = {"name": cname, "ready": started, "restartCount": 0, "image": "busybox"}
        if cid is not None:
            status["containerID"] = cid
            status["state"] = {"running": {"startedAt": "2025-01-01T00:00:00Z"}}
        else:
            status["state"] = {"waiting": {"reason": "ContainerCreating"}}
        statuses.append(status)
    return statuses


def _rfc3339(seconds: float) -> str:
    """Unix seconds as the API writes a time: RFC 3339 in UTC, whole seconds."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_field_selector(text: str) -> list[tuple[str, str, bool]]:
    """A ``fieldSelector`` as ``(path, value, equal)`` terms: ``spec.nodeName=n`` (or ``==``), ``a!=b``."""
    out = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            out.append((key, value, False))
        else:
            key, value = re.split(r"==?", term, maxsplit=1)
            out.append((key, value, True))
    return out


def field_of(obj: Obj, path: str) -> str:
    """The value at a dotted ``path`` of ``obj`` as a string (``""`` where there is none)."""
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part, "") if isinstance(cur, dict) else ""
    return str(cur)


def match_labels(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a ``labelSelector`` string, by ``gpuscale.scaling.selector`` (the scaler's own
    parser: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``); empty matches all.
    ``SelectorError`` for a selector the API server would refuse."""
    return not selector.strip() or _selector(selector).matches(labels)


@functools.lru_cache(maxsize=256)
def _selector(text: str) -> LabelSelector:
    return parse_selector(text)


def format_label_selector(selector: Obj) -> str:
    """``metav1.LabelSelector`` → its string form, requirements sorted by key (as ``selector.String()``)."""
    reqs: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], sorted(expr.get("values") or [])
        text = {
            "In": f"{key} in ({','.join(values)})",
            "NotIn": f"{key} notin ({','.join(values)})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }[op]
        reqs.append((key, text))
    return ",".join(t for _, t in sorted(reqs))


def write_kubeconfig(
    path: Path, server: str, token: str | None = None, *, namespace: str = "default"
) -> Path:
    """A kubeconfig with one cluster/user/context pointing at ``server`` (JSON is valid YAML)."""
    user: Obj = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": user}],
        "contexts": [
            {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}
        ],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config, indent=2))
    return path


def dra_version_of(obj: Obj, version: str) -> Obj:
    """A ResourceSlice stored in the ``v1`` form, as ``resource.k8s.io/<version>`` serves it."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{DRA_GROUP}/{version}"
    if version == "v1beta1":
        spec = out.get("spec") or {}
        spec["devices"] = [
            {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
            for d in spec.get("devices") or []
        ]
    return out


def scale_of(obj: Obj) -> Obj:
    """The ``autoscaling/v1`` Scale of a stored object: its replicas, and its selector as a string."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if isinstance(status.get("selector"), str):
        selector = status["selector"]
    elif isinstance(spec.get("selector"), dict):
        selector = format_label_selector(spec["selector"])
    else:
        selector = ""
    scale_status: Obj = {"replicas": status.get("replicas", 0)}
    if selector:
        scale_status["selector"] = selector
    scale: Obj = {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: obj["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")},
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": scale_status,
    }
    return scale
