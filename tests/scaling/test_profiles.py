"""Profiles: the built-ins, and loading a YAML file that adds or replaces profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscale.scaler import load_profiles
from gpuscale.scaling import BUILTIN_PROFILES, ProfileError, ProfileSet, parse_metadata
from gpuscale.scaling.profiles import parse_profiles

REQUIRED = {
    "batch-inference",
    "llm-serving",
    "online-inference",
    "training-throughput",
    "memory-bound",
    "power-capped",
}


def test_builtins_are_complete_and_valid() -> None:
    builtin = ProfileSet.builtin()
    assert REQUIRED <= set(builtin)
    for profile in BUILTIN_PROFILES:
        assert None not in (profile.metric, profile.aggregation, profile.target_value, profile.window)
        assert profile.description
        parsed = parse_metadata({"profile": profile.name})  # every built-in is usable as is
        assert parsed.target_value == profile.target_value


def test_builtins_are_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "profiles.md").read_text(encoding="utf-8")
    for profile in BUILTIN_PROFILES:
        assert f"## `{profile.name}`" in doc


def test_profile_set_is_a_hashable_mapping() -> None:
    a, b = ProfileSet.builtin(), ProfileSet.builtin()
    assert a == b and hash(a) == hash(b) and a is not b
    assert list(a) == sorted(a)
    assert a != a.with_profiles([BUILTIN_PROFILES[0].__class__("extra")])


def test_load_adds_extends_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(
        """
profiles:
  my-llm:
    extends: llm-serving
    description: our vLLM fleet
    targetValue: 75
  llm-serving:
    metric: power_percent
    aggregation: max
    targetValue: "70"
    staleAfter: 20
    window: 20
  mem:
    extends: my-llm
    metric: requests_in_flight
    targetValue: 40
""",
        encoding="utf-8",
    )
    profiles = load_profiles(path)
    assert profiles["my-llm"].target_value == 75.0
    assert profiles["my-llm"].window == 10.0  # from the built-in llm-serving, defined before the override
    assert profiles["my-llm"].description == "our vLLM fleet"
    replaced = profiles["llm-serving"]
    assert (replaced.metric, replaced.aggregation, replaced.target_value) == ("power_percent", "max", 70.0)
    assert replaced.activation_value is None  # replaced whole, not merged
    assert profiles["mem"].target_value == 40.0 and profiles["mem"].kv_cache_guard == 80.0  # inherited
    assert "power-capped" in profiles
    assert parse_metadata({"profile": "my-llm"}, profiles).target_value == 75.0


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        (
            "[]",
            (
                'the file must be a mapping with a key "profiles" holding a mapping of profile names to fields',
            ),
        ),
        ("profiles: {}\nextra: 1", ('top-level key "extra" is not known; the only key is "profiles"',)),
        (
            "profiles:\n  llm-serving:\n    aggregation: mean",
            (
                'profile "llm-serving" field "aggregation": value "mean" must be one of '
                "[avg, max, min, p50, p90, p95, p99, sum]",
            ),
        ),
        (
            "profiles:\n  Bad_Name: {}",
            (
                "profile name \"Bad_Name\" must be 1 to 63 lowercase letters, digits and '-', starting and ending "
                "with a letter or digit",
            ),
        ),
        ("profiles:\n  a: 5", ('profile "a" must be a mapping of fields, not "5"',)),
        (
            "profiles:\n  a:\n    targetValue: true\n    window: -1\n    staleAfter: .inf\n    colour: red",
            (
                'profile "a" field "targetValue": value "True" must be a finite number',
                'profile "a" field "window": value "-1" must be at least 0',
                'profile "a" field "staleAfter": value "inf" must be a finite number',
                'profile "a" field "colour": not known; known fields are [activationValue, aggregation, '
                "description, engineDemand, extends, kvCacheGuard, maxMissingPercent, metric, replicaRate, requestPathDrainSeconds, scaleAhead, scope, share, staleAfter, targetValue, window]",
            ),
        ),
        (
            "profiles:\n  a:\n    extends: b\n  b: {}",
            (
                'profile "a" field "extends": value "b" must be one of [batch-inference, llm-latency, llm-serving, memory-bound, '
                "memory-capacity, online-inference, power-capped, training-throughput] (built-in or defined earlier)",
            ),
        ),
        (
            "profiles:\n  a:\n    extends: online-inference\n    targetValue: 150\n    window: 30",
            (
                'profile "a" field "targetValue": value "150" must be at most 100 for metric "gpu_utilization" '
                "(a percentage)",
                'profile "a" field "window": value "30" must be at most staleAfter (15): older samples never count',
            ),
        ),
        (
            "profiles:\n  a:\n    description: 5",
            ('profile "a" field "description": value "5" must be a string',),
        ),
    ],
)
def test_bad_files(tmp_path: Path, text: str, problems: tuple[str, ...]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profiles(path)
    assert info.value.problems == problems
    assert info.value.source == str(path)
    assert str(info.value).startswith(f"{path}: {len(problems)} problem")


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read the file"):
        load_profiles(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles: [", encoding="utf-8")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profiles(bad)


def test_parse_profiles_with_base() -> None:
    profiles = parse_profiles({"profiles": {"x": {"targetValue": 1}}}, base=ProfileSet())
    assert list(profiles) == ["x"]
