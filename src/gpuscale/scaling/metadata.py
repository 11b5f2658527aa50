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
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, TypeVar

from . import keys
from ._metadata_checks import check_model, request_path, selectors, target_share
from .errors import MetadataError
from .keys import AGGREGATIONS, METRICS, SCOPES, SHARES, check_choice, check_value, show
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
from .requestpath import RequestPathRef
from .selector import LabelSelector

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
_FROM_ENV = "FromEnv"
# The keys a profile sets for its own metric (see ``_layers``)
_FOR_ITS_METRIC = ("targetValue", "activationValue", "kvCacheGuard", "scaleAhead", "engineDemand")
# Each ``Literal``'s values, to read a checked value back as its type.
_METRICS: Final[Mapping[object, Metric]] = {m: m for m in METRICS}
_AGGREGATIONS: Final[Mapping[object, Aggregation]] = {a: a for a in AGGREGATIONS}
_SCOPES: Final[Mapping[object, Scope]] = {s: s for s in SCOPES}
_SHARES: Final[Mapping[object, Share]] = {s: s for s in SHARES}

T = TypeVar("T")


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
    profile = _profile(raw, profiles, problems)
    explicit, metric, share = _explicit(raw, profile, problems)
    layers = _layers(raw, explicit, profile, metric, problems)
    scope = layers.values.get("scope")
    if "engineDemand" in layers.values and layers.origin.get("engineDemand") and scope != "workload":
        # a profile's choice for the engines of a workload: nothing to uncap here
        del layers.values["engineDemand"]
    found = selectors(raw, scope, problems)
    check_model(raw, layers.values.get("metric"), problems)
    ref = request_path(raw, scope, problems)
    _combinations(raw, layers, problems)
    if problems:
        raise MetadataError(tuple(problems))
    return TriggerMetadata(
        metric=_given(layers.choice("metric", _METRICS)),
        aggregation=_given(layers.choice("aggregation", _AGGREGATIONS)),
        target_value=float(_given(layers.number("targetValue"))),
        activation_value=float(_given(layers.number("activationValue"))),
        window=float(_given(layers.number("window"))),
        stale_after=float(_given(layers.number("staleAfter"))),
        scope=_given(layers.choice("scope", _SCOPES)),
        share=_given(layers.choice("share", _SHARES)),
        max_missing_percent=float(_given(layers.number("maxMissingPercent"))),
        profile=profile.name if profile else None,
        pod_selector=found.get("podSelector"),
        namespace=raw.get("namespace"),
        node_selector=found.get("nodeSelector"),
        model=raw.get("model"),
        scale_ahead=_given(layers.text("scaleAhead")),
        kv_cache_guard=_float(layers.number("kvCacheGuard")),
        engine_demand=layers.text("engineDemand"),
        request_path=ref,
        request_path_format=raw.get("requestPathFormat"),
        request_path_match=raw.get("requestPathMatch"),
        replica_rate=_float(layers.number("replicaRate")),
        request_path_drain_seconds=float(_given(layers.number("requestPathDrainSeconds"))),
        target_share=share is not None,
    )


def _profile(raw: Mapping[str, str], profiles: ProfileSet, problems: list[str]) -> Profile | None:
    """The profile the trigger names, if any (a name the set lacks is reported)."""
    if "profile" not in raw:
        return None
    name, tail = check_choice(raw["profile"], profiles)
    if name is None:
        problems.append(f'parameter "profile" value {show(raw["profile"])} {tail}')
        return None
    return profiles[name]


def _explicit(
    raw: Mapping[str, str], profile: Profile | None, problems: list[str]
) -> tuple[dict[str, object], object, float | None]:
    """The ``choice`` and ``number`` keys the trigger gives, each checked alone from the key table: the
    choices first, since the metric (the trigger's, else the profile's, else the default) decides whether
    byte quantities are numbers; then ``targetValue`` as a share. Returns the values, the metric and the
    share (``None``: ``targetValue`` is not one)."""
    explicit: dict[str, object] = {}
    for k in keys.KEYS:
        if k.kind == "choice" and k.name in raw and k.name != "profile":
            choice, tail = check_value(k, raw[k.name])
            _note(explicit, problems, k.name, raw[k.name], choice, tail)
    metric = explicit.get("metric", profile.metric if profile and profile.metric else DEFAULTS["metric"])
    share = target_share(raw, metric, problems)
    for k in keys.KEYS:
        if k.kind == "number" and k.name in raw and not (share is not None and k.name == "targetValue"):
            number, tail = check_value(k, raw[k.name], metric=metric)
            _note(explicit, problems, k.name, raw[k.name], number, tail)
    if share is not None:
        explicit["targetValue"] = share
    return explicit, metric, share


def _layers(
    raw: Mapping[str, str],
    explicit: Mapping[str, object],
    profile: Profile | None,
    metric: object,
    problems: list[str],
) -> _Layers:
    """Each profile key's value by precedence: explicit key > profile > built-in default. A key given but
    invalid (already reported) has none; a missing ``targetValue`` is reported."""
    # A profile's thresholds are in its metric's unit, and its guard and scale-ahead are chosen for its
    # metric: they do not carry over to another metric.
    foreign = profile is not None and raw.get("metric") is not None and profile.metric not in (None, metric)
    layers = _Layers()
    for key in _PROFILE_KEYS:
        from_profile = field_value(profile, key) if profile is not None else None
        if foreign and key in _FOR_ITS_METRIC:
            from_profile = None
        if key in explicit:
            layers.set(key, explicit[key], "")
        elif key in raw:
            continue  # invalid: already reported
        elif profile is not None and from_profile is not None:
            layers.set(key, from_profile, f' (from profile "{profile.name}")')
        elif key in DEFAULTS:
            layers.set(key, DEFAULTS[key], " (default)")
    if "targetValue" not in raw and "targetValue" not in layers.values:
        why = (
            f'profile "{profile.name}" sets none for metric "{metric}"' if profile else "no profile is given"
        )
        problems.append(f'parameter "targetValue" is required ({why}); give a number greater than 0')
    return layers


def _combinations(raw: Mapping[str, str], v: _Layers, problems: list[str]) -> None:
    """The problems of values that are fine alone but not together (``profiles.combination_problems``),
    each shown as given, or with where it came from (a profile, the default)."""
    for key, bad, tail in combination_problems(
        metric=v.choice("metric", _METRICS),
        aggregation=v.choice("aggregation", _AGGREGATIONS),
        scope=v.choice("scope", _SCOPES),
        share=v.choice("share", _SHARES),
        target=v.number("targetValue"),
        activation=v.number("activationValue"),
        window=v.number("window"),
        stale_after=v.number("staleAfter"),
        scale_ahead=v.text("scaleAhead"),
        kv_cache_guard=v.number("kvCacheGuard"),
        engine_demand=v.text("engineDemand"),
    ):
        shown = raw[key] if v.origin.get(key) == "" else bad
        problems.append(f'parameter "{key}" value {show(shown)}{v.origin.get(key, "")} {tail}')


class _Layers:
    """The value of each profile key after precedence, and where it came from: ``""`` (the trigger),
    ``' (from profile "…")'``, ``" (default)"``. Read through the typed accessors: every value was
    checked against its key (or is a profile's or the default), so a value of another type is none."""

    __slots__ = ("origin", "values")

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.origin: dict[str, str] = {}

    def set(self, key: str, value: object, origin: str) -> None:
        self.values[key], self.origin[key] = value, origin

    def number(self, key: str) -> float | None:
        value = self.values.get(key)
        return value if isinstance(value, int | float) else None

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None

    def choice(self, key: str, allowed: Mapping[object, T]) -> T | None:
        """The value as one of ``allowed`` (a table of a ``Literal``'s values)."""
        return allowed.get(self.values.get(key))


def _given(value: T | None) -> T:
    """A value the parse has made sure of: with no problem reported, every key that needs one has one."""
    assert value is not None
    return value


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _note(
    out: dict[str, object], problems: list[str], key: str, raw: object, value: object, tail: str | None
) -> None:
    if tail is None:
        out[key] = value
    else:
        problems.append(f'parameter "{key}" value {show(raw)} {tail}')


def _collect_keys(metadata: Mapping[str, str], problems: list[str]) -> dict[str, str]:
    """Our keys (``xFromEnv`` folded into ``x``) with their raw values; report unknown keys and conflicts."""
    raw: dict[str, str] = {}
    for key in sorted(metadata, key=str):
        value: object = metadata[key]
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
