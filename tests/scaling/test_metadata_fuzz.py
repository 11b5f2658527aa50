"""Random metadata never raises anything but MetadataError, and what parses is consistent."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.scaling import MetadataCache, MetadataError, parse_metadata
from gpuscale.scaling.metadata import KEYS

VALUES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "70",
            "0",
            "-1",
            "1e999",
            "nan",
            "40Gi",
            "p95",
            "sum",
            "avg",
            "pool",
            "node",
            "workload",
            "container",
            "gpu",
            "llm-serving",
            "memory_used",
            "power_percent",
            "app=llm",
            "a in ()",
            "!x",
            "ml",
            "120",
            "5",
        ]
    ),
    st.floats(allow_nan=True).map(str),
)
KEY = st.one_of(
    st.sampled_from([*KEYS, "scalerAddress", "targetValueFromEnv", "windowFromEnv"]), st.text(max_size=12)
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEY, VALUES, max_size=8))
def test_only_metadata_errors(metadata: dict[str, str]) -> None:
    try:
        parsed = parse_metadata(metadata)
    except MetadataError as e:
        assert e.problems and all(isinstance(p, str) and p for p in e.problems)
        return
    assert parsed.target_value > 0 and math.isfinite(parsed.target_value)
    assert parsed.activation_value >= 0 and parsed.window <= parsed.stale_after
    assert (parsed.node_selector is not None) == (parsed.scope == "pool")
    assert parsed.metric_name.replace("-", "").isalnum() and parsed.metric_name.islower()


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(KEY, VALUES, max_size=6))
def test_cache_agrees_with_parse(metadata: dict[str, str]) -> None:
    cache = MetadataCache(maxsize=8)
    for _ in range(2):
        try:
            expected: object = parse_metadata(metadata)
        except MetadataError as e:
            expected = e.problems
        try:
            got: object = cache.parse(metadata)
        except MetadataError as e:
            got = e.problems
        assert got == expected
