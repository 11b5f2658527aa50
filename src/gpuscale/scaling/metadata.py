"""Trigger metadata: the ``metadata`` map of a ScaledObject's ``external``/``external-push`` trigger,
parsed once into a frozen, validated ``TriggerMetadata``.

Precedence: explicit key > profile > built-in default. Every problem is collected before one
``MetadataError`` is raised; each names the key, the value and what is allowed. KEDA's own keys
(``scalerAddress``, TLS keys, …) are known and ignored; ``<key>FromEnv`` (resolved by KEDA from the target's
environment) stands for ``<key>``. ``MetadataCache`` keeps parsed results (and errors) per metadata content.
``docs/metadata.md`` is the user reference.
"""

from __future__ import annotations

import difflib
import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, cast

from . import keys
from .errors import MetadataError, SelectorError
from .keys import check_choice, check_value, show
from .profiles import (
    Aggregation,
    Metric,
    Profile,
    ProfileSet,
    Scope,
    Share,
    combination_problems,
    field_value,
)
from .requestpath import RequestPathRef, parse_ref
from .selector import LabelSelector, parse_selector

__all__ = [
    "DEFAULTS",
    "KEDA_KEYS",
    "KEYS",
    "MetadataCache",
    "TriggerMetadata",
    "derived",
    "metric_name",
    "parse_metadata",
    "target",
]

KEYS: Final = keys.KEY_NAMES
KEDA_KEYS: Final = keys.KEDA_KEYS
# No default for targetValue: a profile or the trigger must give it.
DEFAULTS: Final[Mapping[str, object]] = {k.name: k.default for k in keys.KEYS if k.default is not None}
_PROFILE_KEYS = tuple(k.name for k in keys.PROFILE_KEYS)
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_FROM_ENV = "FromEnv"


@dataclass(frozen=True, slots=True)
class TriggerMetadata:
    """Validated trigger metadata. Selectors and ``namespace`` are ``None`` when not given."""

    metric: Metric
    aggregation: Aggregation
    target_value: float
    activation_value: float
    window: float
    stale_after: float
    scope: Scope
    share: Share
    max_missing_percent: float = 50.0
    profile: str | None = None
    pod_selector: LabelSelector | None = None
    namespace: str | None = None
    node_selector: LabelSelector | None = None
    model: str | None = None
    scale_ahead: str = "off"
    kv_cache_guard: float | None = None
    engine_demand: str | None = None  # None: auto where it applies (gpu_utilization, workload scope)
    request_path: RequestPathRef | None = None
    request_path_format: str | None = None
    request_path_match: str | None = None
    replica_rate: float | None = None
    request_path_drain_seconds: float = 60.0
    # targetValue is a percentage of what one replica serves (``targetValue: 80%``, request_rate only): of
    # the capacity learned, ``replica_rate`` until one is
    target_share: bool = False

    @property
    def metric_name(self) -> str:
        return metric_name(self)


@functools.lru_cache(maxsize=4096)
def derived(
    md: TriggerMetadata, *, metric: str | None = None, window: float | None = None
) -> TriggerMetadata:
    """``md`` with another ``metric`` or ``window``, as the decisions ask for it on every answer (the
    request rate beside a GPU metric, the newest value beside the window's): ``dataclasses.replace`` builds
    and checks a whole object each time, a cost the scaler pays per ScaledObject per agent update; the few
    variants there are are kept."""
    changes: dict[str, object] = {}
    if metric is not None:
        changes["metric"] = metric
    if window is not None:
        changes["window"] = window
    return replace(md, **changes)  # type: ignore[arg-type]


def metric_name(metadata: TriggerMetadata) -> str:
    """A stable, KEDA-safe (``[a-z0-9-]``) name for GetMetricSpec, e.g. ``gpuscale-gpu-utilization-avg``;
    non-default scope and share are appended (``…-p95-pool``, ``…-avg-container``)."""
    parts = ["gpuscale", metadata.metric.replace("_", "-"), metadata.aggregation]
    if metadata.scope != "workload":
        parts.append(metadata.scope)
    if metadata.share != "gpu":
        parts.append(metadata.share)
    return "-".join(parts)


def target(metadata: TriggerMetadata) -> float:
    """The target for GetMetricSpec (per replica in workload scope)."""
    return metadata.target_value


def parse_metadata(metadata: Mapping[str, str], profiles: ProfileSet | None = None) -> TriggerMetadata:
    """Parse and validate; raise ``MetadataError`` listing every problem."""
    profiles = ProfileSet.builtin() if profiles is None else profiles
    problems: list[str] = []
    raw = _collect_keys(metadata, problems)

    profile: Profile | None = None
    if "profile" in raw:
        name, tail = check_choice(raw["profile"], profiles)
        if tail is not None:
            problems.append(f'parameter "profile" value {show(raw["profile"])} {tail}')
        else:
            profile = profiles[cast(str, name)]

    explicit: dict[str, object] = {}
    metric_raw = raw.get("metric")
    for k in keys.KEYS:
        if k.kind == "choice" and k.name in raw and k.name != "profile":
            choice, tail = check_value(k, raw[k.name])
            _note(explicit, problems, k.name, raw[k.name], choice, tail)
    metric = explicit.get("metric", profile.metric if profile and profile.metric else DEFAULTS["metric"])
    share = _target_share(raw, metric, problems)
    for k in keys.KEYS:
        if k.kind == "number" and k.name in raw and not (share is not None and k.name == "targetValue"):
            number, tail = check_value(k, raw[k.name], metric=metric)
            _note(explicit, problems, k.name, raw[k.name], number, tail)
    if share is not None:
        explicit["targetValue"] = share

    # A profile's thresholds are in its metric's unit, and its guard and scale-ahead are chosen for its
    # metric: they do not carry over to another metric.
    foreign = profile is not None and metric_raw is not None and profile.metric not in (None, metric)
    values: dict[str, object] = {}
    origin: dict[str, str] = {}
    for key in _PROFILE_KEYS:
        from_profile = field_value(profile, key) if profile is not None else None
        if foreign and key in (
            "targetValue",
            "activationValue",
            "kvCacheGuard",
            "scaleAhead",
            "engineDemand",
        ):
            from_profile = None
        if key in explicit:
            values[key], origin[key] = explicit[key], ""
        elif key in raw:
            continue  # invalid: already reported
        elif from_profile is not None:
            values[key], origin[key] = from_profile, f' (from profile "{cast(Profile, profile).name}")'
        elif key in DEFAULTS:
            values[key], origin[key] = DEFAULTS[key], " (default)"
    if "targetValue" not in raw and "targetValue" not in values:
        why = (
            f'profile "{profile.name}" sets none for metric "{metric}"' if profile else "no profile is given"
        )
        problems.append(f'parameter "targetValue" is required ({why}); give a number greater than 0')

    scope = values.get("scope")
    if "engineDemand" in values and origin.get("engineDemand") and scope != "workload":
        del values["engineDemand"]  # a profile's choice for the engines of a workload: nothing to uncap here
    selectors = _selectors(raw, scope, problems)
    model = raw.get("model")
    if model is not None:
        if not isinstance(model, str) or not model.strip() or model != model.strip():
            problems.append(
                f'parameter "model" value {show(model)} must be a model name as the engine labels it (no '
                "surrounding spaces); leave it out for every model"
            )
        elif "metric" in values and values["metric"] not in keys.ENGINE_METRICS:
            problems.append(
                f'parameter "model" value {show(model)} is only allowed with an engine metric '
                f'({", ".join(sorted(keys.ENGINE_METRICS))}); metric is "{values["metric"]}"'
            )
    request_path = _request_path(raw, values, scope, problems)
    for key, bad, tail in combination_problems(
        metric=cast(Metric | None, values.get("metric")),
        aggregation=cast(Aggregation | None, values.get("aggregation")),
        scope=cast(Scope | None, scope),
        share=cast(Share | None, values.get("share")),
        target=cast(float | None, values.get("targetValue")),
        activation=cast(float | None, values.get("activationValue")),
        window=cast(float | None, values.get("window")),
        stale_after=cast(float | None, values.get("staleAfter")),
        scale_ahead=cast(str | None, values.get("scaleAhead")),
        kv_cache_guard=cast(float | None, values.get("kvCacheGuard")),
        engine_demand=cast(str | None, values.get("engineDemand")),
    ):
        shown = raw[key] if origin.get(key) == "" else bad
        problems.append(f'parameter "{key}" value {show(shown)}{origin.get(key, "")} {tail}')

    if problems:
        raise MetadataError(tuple(problems))
    return TriggerMetadata(
        metric=cast(Metric, values["metric"]),
        aggregation=cast(Aggregation, values["aggregation"]),
        target_value=float(cast(float, values["targetValue"])),
        activation_value=float(cast(float, values["activationValue"])),
        window=float(cast(float, values["window"])),
        stale_after=float(cast(float, values["staleAfter"])),
        scope=cast(Scope, values["scope"]),
        share=cast(Share, values["share"]),
        max_missing_percent=float(cast(float, values["maxMissingPercent"])),
        profile=profile.name if profile else None,
        pod_selector=selectors.get("podSelector"),
        namespace=cast(str | None, raw.get("namespace")),
        node_selector=selectors.get("nodeSelector"),
        model=cast(str | None, raw.get("model")),
        scale_ahead=cast(str, values["scaleAhead"]),
        kv_cache_guard=None
        if values.get("kvCacheGuard") is None
        else float(cast(float, values["kvCacheGuard"])),
        engine_demand=cast(str | None, values.get("engineDemand")),
        request_path=request_path,
        request_path_format=cast(str | None, explicit.get("requestPathFormat")),
        request_path_match=cast(str | None, raw.get("requestPathMatch")),
        replica_rate=None if values.get("replicaRate") is None else float(cast(float, values["replicaRate"])),
        request_path_drain_seconds=float(cast(float, values["requestPathDrainSeconds"])),
        target_share=share is not None,
    )


def _request_path(
    raw: Mapping[str, object], values: dict[str, object], scope: object, problems: list[str]
) -> RequestPathRef | None:
    """``requestPath`` and the keys that go with it: the Service, its format (required), its match."""
    text = raw.get("requestPath")
    ref: RequestPathRef | None = None
    if text is not None:
        ref, tail = parse_ref(cast(str, text))
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
    if match is not None and (not isinstance(match, str) or not match.strip() or match != match.strip()):
        problems.append(
            f'parameter "requestPathMatch" value {show(match)} must be the workload label\'s value (no '
            "surrounding spaces); leave it out for every series"
        )
    for key in ("requestPathFormat", "requestPathMatch", "replicaRate"):
        if key == "replicaRate" and _is_share(raw.get("targetValue")):
            continue  # a share of the capacity: replicaRate is the figure until one is learned
        if text is None and key in raw:
            problems.append(f'parameter "{key}" value {show(raw[key])} is only allowed with "requestPath"')
    return ref


def _is_share(raw: object) -> bool:
    return isinstance(raw, str) and raw.strip().endswith("%")


def _target_share(raw: Mapping[str, object], metric: object, problems: list[str]) -> float | None:
    """``targetValue: 80%``: a share of what one replica serves (``request_rate`` only, with ``replicaRate``
    as the figure until the scaler has learned one); the percentage, or ``None`` (not a share, or bad:
    reported)."""
    text = raw.get("targetValue")
    if not _is_share(text):
        return None
    assert isinstance(text, str)
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


def _note(
    out: dict[str, object], problems: list[str], key: str, raw: object, value: object, tail: str | None
) -> None:
    if tail is None:
        out[key] = value
    else:
        problems.append(f'parameter "{key}" value {show(raw)} {tail}')


def _collect_keys(metadata: Mapping[str, str], problems: list[str]) -> dict[str, object]:
    """Our keys (``xFromEnv`` folded into ``x``) with their raw values; report unknown keys and conflicts."""
    raw: dict[str, object] = {}
    for key in sorted(metadata, key=str):
        value = cast(object, metadata[key])
        if not isinstance(key, str):
            problems.append(f"parameter {show(key)} must be a string key")
            continue
        base = key[: -len(_FROM_ENV)] if key.endswith(_FROM_ENV) else key
        if key in KEDA_KEYS or base in KEDA_KEYS:
            continue
        if key not in KEYS and base not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            problems.append(
                f"parameter {show(key)} is not known{hint}; known parameters are [{', '.join(KEYS)}]"
            )
            continue
        name = key if key in KEYS else base
        if name in raw:
            problems.append(f'parameters "{name}" and "{name}{_FROM_ENV}" are both set; give only one')
            continue
        if not isinstance(value, str):
            problems.append(f'parameter "{name}" value {show(value)} must be a string')
            continue
        raw[name] = value
    return raw


def _selectors(raw: Mapping[str, object], scope: object, problems: list[str]) -> dict[str, LabelSelector]:
    out: dict[str, LabelSelector] = {}
    for key, allowed_scope in (("podSelector", "workload"), ("nodeSelector", "pool")):
        text = raw.get(key)
        if text is None:
            continue
        assert isinstance(text, str)
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
        elif not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            problems.append(
                f'parameter "namespace" value {show(namespace)} must be a Kubernetes namespace name '
                "(1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
            )
    return out


class MetadataCache:
    """A thread-safe LRU of parse results (``TriggerMetadata`` or the problems of a ``MetadataError``), keyed
    by the metadata content and the profile set. Bounded by ``maxsize`` entries; metadata larger than
    ``max_chars`` in total is parsed every time rather than kept."""

    def __init__(
        self, profiles: ProfileSet | None = None, *, maxsize: int = 4096, max_chars: int = 16384
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, not {maxsize}")
        self.profiles = ProfileSet.builtin() if profiles is None else profiles
        self.maxsize = maxsize
        self.max_chars = max_chars
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[object, TriggerMetadata | tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def parse(self, metadata: Mapping[str, str], profiles: ProfileSet | None = None) -> TriggerMetadata:
        """``parse_metadata(metadata, profiles or self.profiles)``, cached."""
        profiles = self.profiles if profiles is None else profiles
        try:
            items = frozenset(metadata.items())
            size = sum(len(k) + len(v) for k, v in items)
        except TypeError:  # unhashable or non-string values: not cacheable, parse reports them
            return parse_metadata(metadata, profiles)
        if size > self.max_chars:
            return parse_metadata(metadata, profiles)
        key = (items, profiles)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        if entry is None:
            try:
                entry = parse_metadata(metadata, profiles)
            except MetadataError as e:
                entry = e.problems
            with self._lock:
                self.misses += 1
                self._entries[key] = entry
                self._entries.move_to_end(key)
                while len(self._entries) > self.maxsize:
                    self._entries.popitem(last=False)
        if isinstance(entry, tuple):
            raise MetadataError(entry)
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
