"""The one table of trigger keys: parsing, profiles, the doc's key table and the chart's schema follow it."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import jsonschema
import pytest

from gpuscale.scaling import MetadataError, ProfileError, ProfileSet, parse_metadata
from gpuscale.scaling.keys import KEYS, PROFILE_KEYS, keys_markdown, profile_schema
from gpuscale.scaling.profiles import Aggregation, Metric, Profile, Scope, Share, parse_profiles

DOC = Path(__file__).resolve().parents[2] / "docs" / "metadata.md"


def test_the_docs_key_table_is_the_table() -> None:
    block = re.search(r"<!-- keys:begin[^>]*-->\n(.*?)<!-- keys:end -->", DOC.read_text(), re.S)
    assert block is not None, "docs/metadata.md lost its generated key table"
    assert block[1] == keys_markdown(ProfileSet.builtin()), "run scripts/gen-docs"


def test_the_typed_vocabulary_is_the_tables() -> None:
    by_name = {k.name: k for k in KEYS}
    for key, literal in (
        ("metric", Metric),
        ("aggregation", Aggregation),
        ("scope", Scope),
        ("share", Share),
    ):
        assert sorted(typing.get_args(literal)) == sorted(by_name[key].choices)


def test_profiles_set_exactly_the_keys_the_table_allows() -> None:
    assert [k.attr for k in PROFILE_KEYS] == [
        f for f in Profile.__dataclass_fields__ if f not in ("name", "description")
    ]
    with pytest.raises(ProfileError) as info:
        parse_profiles({"profiles": {"p": {"podSelector": "app=x"}}})
    assert (
        "known fields are [activationValue, aggregation, description, engineDemand, extends, kvCacheGuard, maxMissingPercent, metric, replicaRate, requestPathDrainSeconds, scaleAhead, scope, share"
        in str(info.value)
    )


@pytest.mark.parametrize(
    "key", [k for k in KEYS if k.kind == "choice" and k.name != "profile"], ids=lambda k: k.name
)
def test_a_bad_choice_names_the_tables_choices(key: typing.Any) -> None:
    with pytest.raises(MetadataError) as info:
        parse_metadata({"targetValue": "50", key.name: "nonsense"})
    assert (
        f'parameter "{key.name}" value "nonsense" must be one of [{", ".join(sorted(key.choices))}]'
        in info.value.problems
    )


@pytest.mark.parametrize("key", [k for k in KEYS if k.kind == "number"], ids=lambda k: k.name)
def test_a_number_below_the_tables_minimum_is_refused(key: typing.Any) -> None:
    word = "greater than" if key.exclusive else "at least"
    value = "0" if key.exclusive else "-1"
    with pytest.raises(MetadataError) as info:
        parse_metadata({"targetValue": "50", key.name: value})
    assert f'parameter "{key.name}" value "{value}" must be {word} {key.minimum:g}' in info.value.problems


@pytest.mark.parametrize("digits", ["\u0667\u0660", "\uff17\uff10", "7\u0660"])  # Arabic-Indic, fullwidth
def test_numbers_take_ascii_digits_only(digits: str) -> None:
    with pytest.raises(MetadataError) as info:
        parse_metadata({"targetValue": digits})
    assert info.value.problems == (f'parameter "targetValue" value "{digits}" must be a finite number',)


def test_the_chart_schema_for_a_profile_holds_the_tables_rules() -> None:
    schema = profile_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    ok = {"extends": "llm-serving", "targetValue": 75, "aggregation": "p95", "window": "30"}
    jsonschema.validate(ok, schema)
    for bad in (
        {"aggregation": "mean"},
        {"targetValue": 0},
        {"window": -1},
        {"podSelector": "a=b"},
        {"scope": "x"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_the_charts_profile_schema_is_the_tables() -> None:
    import json

    chart = DOC.parents[1] / "deploy" / "helm" / "gpuscale" / "values.schema.json"
    profiles = json.loads(chart.read_text())["properties"]["scaler"]["properties"]["profiles"]
    (entry,) = profiles["patternProperties"].values()
    assert entry == {"anyOf": [{"type": "null"}, profile_schema()]}, "run scripts/gen-docs"
