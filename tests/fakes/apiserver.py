"""The fake Kubernetes API server of the tests: the demo cluster's local API server, under its test name.

One implementation (``gpuscale.demo.apiserver``) serves both the demo and the tests; ``select`` and
``target_pods`` add what a request path's Service of pods has beyond what its ``put_service`` and
``put_endpoint_slice`` write (a selector, the endpoints' ``targetRef``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuscale.demo.apiserver import LocalApiServer as FakeApiServer
from gpuscale.demo.apiserver import format_label_selector, make_pod, match_labels, write_kubeconfig

__all__ = [
    "FakeApiServer",
    "format_label_selector",
    "make_pod",
    "match_labels",
    "pod_ref",
    "select",
    "target_pods",
    "write_kubeconfig",
]


def select(service: dict[str, Any], selector: Mapping[str, str]) -> dict[str, Any]:
    """Give a Service ``put_service`` wrote the ``spec.selector`` ``selector`` (read by the next GET)."""
    service["spec"]["selector"] = dict(selector)
    return service


def pod_ref(namespace: str, name: str, kind: str = "Pod") -> dict[str, str]:
    """An endpoint's ``targetRef``, as the EndpointSlice controller writes it for a pod."""
    return {"kind": kind, "namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}"}


def target_pods(slice_: dict[str, Any], targets: Iterable[Mapping[str, str] | None]) -> dict[str, Any]:
    """Give the endpoints of an EndpointSlice ``put_endpoint_slice`` wrote their ``targetRef`` (in order;
    ``None``: none), as the next LIST reads them (a watch already sent it without)."""
    for endpoint, target in zip(slice_["endpoints"], targets, strict=True):
        if target is not None:
            endpoint["targetRef"] = dict(target)
    return slice_
