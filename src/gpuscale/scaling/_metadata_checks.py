"""The trigger metadata keys that are more than a choice or a number, each checked in its own step.

``metadata.parse_metadata`` checks the ``choice`` and ``number`` keys from the table in ``keys``; the rest
need rules of their own: the selectors and ``namespace`` (and the scope each is allowed with), ``model``, the
request path with its format, match and ``replicaRate``, and ``targetValue`` as a share of what a replica
serves. Each step appends its problems, in the words of the user reference (``docs/metadata.md``), and
returns what it parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from . import keys
from .errors import SelectorError
from .keys import show
from .requestpath import RequestPathRef, parse_ref
from .selector import LabelSelector, parse_selector

__all__ = ["check_model", "is_share", "request_path", "selectors", "target_share"]

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def is_share(raw: object) -> bool:
    """Whether a ``targetValue`` is given as a share (``80%``)."""
    return isinstance(raw, str) and raw.strip().endswith("%")


def target_share(raw: Mapping[str, str], metric: object, problems: list[str]) -> float | None:
    """``targetValue: 80%``: a share of what one replica serves (``request_rate`` only, with ``replicaRate``
    as the figure until the scaler has learned one); the percentage, or ``None`` (not a share, or bad:
    reported)."""
    text = raw.get("targetValue")
    if text is None or not is_share(text):
        return None
    number, tail = keys.check_number(text.strip()[:-1], minimum=0, exclusive=True, maximum=100)
    shown = show(text)
    if number is None:
        problems.append(f'parameter "targetValue" value {shown} as a share of a replica\'s capacity {tail}')
        return None
    if metric != "request_rate":
        problems.append(
            f'parameter "targetValue" value {shown}: a share of what one replica serves is only allowed with '
            f'metric "request_rate" (metric is "{metric}"); give a number'
        )
        return None
    if "replicaRate" not in raw:
        problems.append(
            f'parameter "targetValue" value {shown} needs "replicaRate": the requests/s one replica serves '
            "until the scaler has learned it"
        )
        return None
    return number


def selectors(raw: Mapping[str, str], scope: object, problems: list[str]) -> dict[str, LabelSelector]:
    """``podSelector`` (scope workload), ``nodeSelector`` (scope pool, and required there) and ``namespace``
    (scope workload): the selectors parsed, by key."""
    out: dict[str, LabelSelector] = {}
    for key, allowed_scope in (("podSelector", "workload"), ("nodeSelector", "pool")):
        text = raw.get(key)
        if text is None:
            continue
        if scope is not None and scope != allowed_scope:
            problems.append(
                f'parameter "{key}" value {show(text)} is only allowed with scope "{allowed_scope}" '
                f'(scope is "{scope}")'
            )
        elif not text.strip():
            problems.append(
                f'parameter "{key}" value "" must be a non-empty label selector such as "app=llm"'
            )
        else:
            try:
                out[key] = parse_selector(text)
            except SelectorError as e:
                problems.extend(f'parameter "{key}" value {show(text)}: {p}' for p in e.problems)
    if scope == "pool" and "nodeSelector" not in raw:
        problems.append(
            'parameter "nodeSelector" is required with scope "pool"; give a label selector such as '
            '"nvidia.com/gpu.product=NVIDIA-H200"'
        )
    namespace = raw.get("namespace")
    if namespace is not None:
        if scope is not None and scope != "workload":
            problems.append(
                f'parameter "namespace" value {show(namespace)} is only allowed with scope "workload" '
                f'(scope is "{scope}")'
            )
        elif not _NAMESPACE.match(namespace):
            problems.append(
                f'parameter "namespace" value {show(namespace)} must be a Kubernetes namespace name '
                "(1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
            )
    return out


def check_model(raw: Mapping[str, str], metric: object, problems: list[str]) -> None:
    """``model``: a model name as the engine labels it, only with an engine metric (``metric``: the
    trigger's, ``None`` when it has none yet)."""
    model = raw.get("model")
    if model is None:
        return
    if not model.strip() or model != model.strip():
        problems.append(
            f'parameter "model" value {show(model)} must be a model name as the engine labels it (no '
            "surrounding spaces); leave it out for every model"
        )
    elif metric is not None and metric not in keys.ENGINE_METRICS:
        problems.append(
            f'parameter "model" value {show(model)} is only allowed with an engine metric '
            f'({", ".join(sorted(keys.ENGINE_METRICS))}); metric is "{metric}"'
        )


def request_path(raw: Mapping[str, str], scope: object, problems: list[str]) -> RequestPathRef | None:
    """``requestPath`` and the keys that go with it: the Service, its format (required), its match."""
    text = raw.get("requestPath")
    ref: RequestPathRef | None = None
    if text is not None:
        ref, tail = parse_ref(text)
        if tail is not None:
            problems.append(f'parameter "requestPath" value {show(text)} {tail}')
        elif scope is not None and scope != "workload":
            problems.append(
                f'parameter "requestPath" value {show(text)} is only allowed with scope "workload" '
                f'(scope is "{scope}")'
            )
        if "requestPathFormat" not in raw:
            allowed = ", ".join(keys.REQUEST_PATH_FORMATS)
            problems.append(
                f'parameter "requestPathFormat" is required with "requestPath"; give one of [{allowed}]'
            )
    match = raw.get("requestPathMatch")
    if match is not None and (not match.strip() or match != match.strip()):
        problems.append(
            f'parameter "requestPathMatch" value {show(match)} must be the workload label\'s value (no '
            "surrounding spaces); leave it out for every series"
        )
    for key in ("requestPathFormat", "requestPathMatch", "replicaRate"):
        if key == "replicaRate" and is_share(raw.get("targetValue")):
            continue  # a share of the capacity: replicaRate is the figure until one is learned
        if text is None and key in raw:
            problems.append(f'parameter "{key}" value {show(raw[key])} is only allowed with "requestPath"')
    return ref
