"""Profiles: named defaults for a kind of GPU workload, and the vocabulary of the fields they set.

A profile sets some of ``metric``, ``aggregation``, ``targetValue``, ``activationValue``, ``window``,
``staleAfter``, ``scope`` and ``share``; keys given in the trigger metadata override it. The built-in profiles
are below as Python data; ``docs/profiles.md`` gives the reasons for every number.
``parse_profiles_text`` reads a
YAML document that adds profiles or replaces built-in ones (``extends`` inherits the fields of another)::

    profiles:
      my-llm:
        extends: llm-serving
        targetValue: 8

Which keys a profile may set, and what each allows, is ``keys.KEYS``'s. The check of fields that are fine
alone but not together (``combination_problems``) is shared with ``gpuscale.scaling.metadata``: it returns
what is wrong (``must be …``) and each caller says where.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import cast

import yaml

from . import keys
from .errors import ProfileError

# The metrics, aggregations, scopes and shares are listed once, in keys (the table of trigger keys), and
# re-exported here, where profiles name them.
from .keys import (
    AGGREGATIONS,
    METRICS,
    SCOPES,
    SHARES,
    Aggregation,
    Metric,
    Scope,
    Share,
    check_choice,
    check_number,
    check_value,
    show,
)

__all__ = [
    "AGGREGATIONS",
    "BUILTIN_PROFILES",
    "METRICS",
    "PERCENT_METRICS",
    "SCOPES",
    "SHARES",
    "Aggregation",
    "Metric",
    "Profile",
    "ProfileSet",
    "Scope",
    "Share",
    "check_choice",
    "check_number",
    "exact",
    "parse_profiles",
    "parse_profiles_text",
    "show",
]

PERCENT_METRICS: frozenset[Metric] = frozenset(
    {
        "kv_cache_usage",
        "gpu_utilization",
        "memory_utilization",
        "memory_used_percent",
        "power_percent",
        "gr_engine_active",
        "sm_active",
        "sm_occupancy",
        "tensor_active",
        "dram_active",
    }
)
CONTAINER_METRICS: tuple[Metric, ...] = ("gpu_utilization", "memory_used", "memory_used_percent")

_PROFILE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def exact(value: float) -> str:
    """A number as a manifest or trigger metadata carries it: every digit (``75161927680``, ``70.5``);
    ``:g`` keeps six significant digits, and 70Gi would become 7.51619e+10."""
    if value.is_integer() and abs(value) < 1e18:
        return str(int(value))
    return repr(value)


def combination_problems(
    *,
    metric: Metric | None,
    aggregation: Aggregation | None,
    scope: Scope | None,
    share: Share | None,
    target: float | None,
    activation: float | None,
    window: float | None,
    stale_after: float | None,
    scale_ahead: str | None = None,
    kv_cache_guard: float | None = None,
    engine_demand: str | None = None,
) -> list[tuple[str, float | str, str]]:
    """Problems of fields that are fine alone but not together: ``(key, value, "must be …")``.
    A ``None`` field is not known yet; checks needing it are skipped."""
    out: list[tuple[str, float | str, str]] = []
    percent = metric in PERCENT_METRICS and aggregation is not None and aggregation != "sum"
    if percent and target is not None and target > 100:
        out.append(("targetValue", target, f'must be at most 100 for metric "{metric}" (a percentage)'))
    if percent and activation is not None and activation >= 100:
        out.append(
            (
                "activationValue",
                activation,
                f'must be less than 100 for metric "{metric}" (a percentage), or the trigger is never active',
            )
        )
    if aggregation == "sum" and scope == "workload":
        out.append(
            (
                "aggregation",
                "sum",
                'is not allowed with scope "workload" (the value is already '
                "multiplied by the pod count); use avg, max, min or a percentile, or scope node or pool",
            )
        )
    if metric in keys.ENGINE_METRICS and scope is not None and scope != "workload":
        why = f'must be "workload" for metric "{metric}" (an engine signal, read per pod)'
        out.append(("scope", scope, why))
    if share == "container" and scope is not None and scope != "workload":
        out.append(("share", "container", f'is only allowed with scope "workload" (scope is "{scope}")'))
    if share == "container" and metric is not None and metric not in CONTAINER_METRICS:
        out.append(
            (
                "share",
                "container",
                f'is only allowed with metric {", ".join(CONTAINER_METRICS)} (metric is "{metric}")',
            )
        )
    if scale_ahead == "auto" and metric is not None and metric not in keys.ADDITIVE_METRICS:
        allowed = ", ".join(sorted(keys.ADDITIVE_METRICS))
        why = (
            f"is only allowed with metric {allowed} (workload sums a trend can carry ahead); "
            f'metric is "{metric}"'
        )
        out.append(("scaleAhead", "auto", why))
    if kv_cache_guard is not None and metric is not None and metric not in keys.ENGINE_METRICS:
        allowed = ", ".join(sorted(keys.ENGINE_METRICS))
        why = f'is only allowed with an engine metric ({allowed}); metric is "{metric}"'
        out.append(("kvCacheGuard", kv_cache_guard, why))
    if engine_demand is not None and metric is not None and metric != "gpu_utilization":
        why = f'is only allowed with metric gpu_utilization (what the engines uncap); metric is "{metric}"'
        out.append(("engineDemand", engine_demand, why))
    elif engine_demand is not None and scope is not None and scope != "workload":
        why = f'is only allowed with scope "workload" (the engines are read per pod); scope is "{scope}"'
        out.append(("engineDemand", engine_demand, why))
    if window is not None and stale_after is not None and window > stale_after:
        out.append(
            ("window", window, f"must be at most staleAfter ({stale_after:g}): older samples never count")
        )
    return out


@dataclass(frozen=True, slots=True)
class Profile:
    """Named defaults. ``None`` fields are not set by the profile (the next default applies)."""

    name: str
    description: str = ""
    metric: Metric | None = None
    aggregation: Aggregation | None = None
    target_value: float | None = None
    activation_value: float | None = None
    window: float | None = None
    stale_after: float | None = None
    max_missing_percent: float | None = None
    scope: Scope | None = None
    share: Share | None = None
    scale_ahead: str | None = None
    engine_demand: str | None = None
    kv_cache_guard: float | None = None
    replica_rate: float | None = None
    request_path_drain_seconds: float | None = None

    def as_metadata(self) -> dict[str, str]:
        """The trigger metadata keys this profile sets, as text (numbers with every digit)."""
        out: dict[str, str] = {}
        for key in _FIELDS:
            value = field_value(self, key)
            if value is not None:
                out[key] = exact(value) if isinstance(value, float) else str(value)
        return out


# fmt: off
def _builtin(name: str, description: str, metric: Metric, aggregation: Aggregation, target: float,
             activation: float, window: float, stale_after: float) -> Profile:
    numbers = (float(target), float(activation), float(window), float(stale_after))
    return Profile(name, description, metric, aggregation, *numbers)


# name, description, metric, aggregation, targetValue, activationValue, window, staleAfter
BUILTIN_PROFILES: tuple[Profile, ...] = (
    replace(_builtin("batch-inference",
                     "offline, queue-fed inference: keep every GPU busy, scale on sustained load",
                     "gpu_utilization", "avg", 90, 0, 60, 90), engine_demand="off"),
    _builtin("llm-latency", "LLM servers scaled on their engine's time to first token (p95, seconds)",
             "ttft_p95", "avg", 1.0, 0, 30, 45),
    replace(_builtin("llm-serving", "LLM servers on their engine's waiting requests, with a KV-cache guard",
                     "queue_length", "avg", 5, 0, 10, 20), kv_cache_guard=80.0, scale_ahead="auto"),
    _builtin("memory-bound", "bandwidth-bound work (LLM decode, embeddings): memory controller load",
             "memory_utilization", "avg", 60, 5, 20, 30),
    _builtin("memory-capacity", "frameworks that allocate and free GPU memory with load: avoid OOM",
             "memory_used_percent", "max", 80, 0, 10, 30),
    _builtin("online-inference", "latency-sensitive inference (Triton, TorchServe): headroom on busy GPUs",
             "gpu_utilization", "p90", 60, 1, 10, 15),
    _builtin("power-capped", "power draw as a share of the enforced limit: tracks work done, not duty cycle",
             "power_percent", "avg", 75, 30, 30, 45),
    _builtin("training-throughput", "elastic or queue-fed training workers: smooth over eval and checkpoints",
             "gpu_utilization", "avg", 90, 0, 120, 180),
)
# fmt: on

_FIELDS: dict[str, str] = {k.name: k.attr for k in keys.PROFILE_KEYS}  # metadata key -> Profile attribute


class ProfileSet(Mapping[str, Profile]):
    """An immutable, hashable set of profiles by name (so it can be part of a cache key)."""

    __slots__ = ("_hash", "_profiles")

    def __init__(self, profiles: Iterable[Profile] = ()) -> None:
        self._profiles: dict[str, Profile] = {p.name: p for p in profiles}
        self._hash = hash(frozenset(self._profiles.items()))

    @classmethod
    def builtin(cls) -> ProfileSet:
        return cls(BUILTIN_PROFILES)

    def with_profiles(self, profiles: Iterable[Profile]) -> ProfileSet:
        """This set plus ``profiles``, which replace same-named ones."""
        return ProfileSet([*self._profiles.values(), *profiles])

    def __getitem__(self, name: str) -> Profile:
        return self._profiles[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._profiles))

    def __len__(self) -> int:
        return len(self._profiles)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProfileSet):
            return NotImplemented
        return self._hash == other._hash and self._profiles == other._profiles

    def __repr__(self) -> str:
        return f"ProfileSet({sorted(self._profiles)})"


def parse_profiles_text(text: str, *, source: str = "profiles", base: ProfileSet | None = None) -> ProfileSet:
    """Parse a profiles YAML document (the text of a file or of the chart's ``scaler.profiles``)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ProfileError((f"not valid YAML: {e}".replace("\n", " "),), source=source) from e
    return parse_profiles(data, source=source, base=base)


def parse_profiles(data: object, *, source: str = "profiles", base: ProfileSet | None = None) -> ProfileSet:
    """Validate already-loaded YAML data (``{"profiles": {name: {field: value}}}``)."""
    base = ProfileSet.builtin() if base is None else base
    problems: list[str] = []
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise ProfileError(
            (
                'the file must be a mapping with a key "profiles" holding a mapping of '
                "profile names to fields",
            ),
            source=source,
        )
    problems.extend(
        f'top-level key "{k}" is not known; the only key is "profiles"' for k in data if k != "profiles"
    )
    known: dict[str, Profile] = dict(base.items())
    parsed: list[Profile] = []
    for name, body in data["profiles"].items():
        profile = _profile(name, body, known, problems)
        if profile is not None:
            known[profile.name] = profile
            parsed.append(profile)
    if problems:
        raise ProfileError(tuple(problems), source=source)
    return base.with_profiles(parsed)


def _profile(name: object, body: object, known: Mapping[str, Profile], problems: list[str]) -> Profile | None:
    if not isinstance(name, str) or not _PROFILE_NAME.match(name):
        problems.append(
            f"profile name {show(name)} must be 1 to 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
        return None
    where = f'profile "{name}"'
    if body is None:
        body = {}
    if not isinstance(body, dict):
        problems.append(f"{where} must be a mapping of fields, not {show(body)}")
        return None
    before = len(problems)
    profile = Profile(name)
    if "extends" in body:
        parent = body["extends"]
        if isinstance(parent, str) and parent in known:
            profile = replace(known[parent], name=name)
        else:
            _, tail = check_choice(parent, known)
            problems.append(
                f'{where} field "extends": value {show(parent)} {tail} (built-in or defined earlier)'
            )
    values: dict[str, object] = {}
    for key, raw in body.items():
        if key == "extends":
            continue
        if key == "description":
            if isinstance(raw, str):
                values["description"] = raw
            else:
                problems.append(f'{where} field "description": value {show(raw)} must be a string')
            continue
        if key not in _FIELDS:
            allowed = ", ".join(sorted([*_FIELDS, "description", "extends"]))
            problems.append(f"{where} field {show(key)}: not known; known fields are [{allowed}]")
            continue
        value, tail = _check_field(key, raw, body.get("metric", profile.metric))
        if tail is not None:
            problems.append(f'{where} field "{key}": value {show(raw)} {tail}')
        else:
            values[_FIELDS[key]] = value
    inherited = profile
    profile = replace(profile, **values)  # type: ignore[arg-type]
    if (
        "engine_demand" not in values
        and profile.engine_demand is not None
        and (profile.metric != inherited.metric or profile.scope not in (None, "workload"))
    ):  # a parent's choice for its metric's engines, as a trigger drops it (metadata.parse)
        profile = replace(profile, engine_demand=None)
    for key, value, tail in combination_problems(
        metric=profile.metric,
        aggregation=profile.aggregation,
        scope=profile.scope,
        share=profile.share,
        target=profile.target_value,
        activation=profile.activation_value,
        window=profile.window,
        stale_after=profile.stale_after,
        scale_ahead=profile.scale_ahead,
        kv_cache_guard=profile.kv_cache_guard,
        engine_demand=profile.engine_demand,
    ):
        problems.append(f'{where} field "{key}": value {show(value)} {tail}')
    return profile if len(problems) == before else None


def _check_field(key: str, raw: object, metric: object) -> tuple[object, str | None]:
    return check_value(keys.BY_NAME[key], raw, metric=metric)


def field_value(profile: Profile, key: str) -> object:
    """The profile's value for a metadata key (``targetValue`` …), or ``None``."""
    return cast(object, getattr(profile, _FIELDS[key]))
