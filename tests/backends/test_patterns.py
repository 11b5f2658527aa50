"""Load patterns: each spec's readings over time, and the exact error for each malformed spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscale.backends.patterns import PATTERN_SYNTAX, parse_pattern, parse_patterns
from gpuscale.errors import UsageError


@pytest.mark.parametrize(
    ("spec", "t", "expected"),
    [
        ("constant:42", 0, 42.0),
        ("constant:42", 1e6, 42.0),
        ("step:10:90:30", 29.9, 10.0),
        ("step:10:90:30", 30.0, 90.0),
        ("ramp:0:100:50", 0, 0.0),
        ("ramp:0:100:50", 25, 50.0),
        ("ramp:0:100:50", 80, 100.0),
        ("sine:20:80:60", 0, 50.0),
        ("sine:20:80:60", 15, 80.0),
        ("sine:20:80:60", 45, 20.0),
        ("square:5:95:10", 4.9, 5.0),
        ("square:5:95:10", 5.0, 95.0),
        ("square:5:95:10", 10.0, 5.0),
    ],
)
def test_pattern_values(spec: str, t: float, expected: float) -> None:
    assert parse_pattern(spec).at(t).utilization == pytest.approx(expected)


def test_walk_is_bounded_and_deterministic_for_a_seed() -> None:
    a, b, c = (
        parse_pattern("walk:20:70", seed=7),
        parse_pattern("walk:20:70", seed=7),
        parse_pattern("walk:20:70", seed=8),
    )
    ts = [i * 0.5 for i in range(600)]
    va = [a.at(t).utilization for t in ts]
    assert va == [b.at(t).utilization for t in ts]
    assert va != [c.at(t).utilization for t in ts]
    assert all(20.0 <= v <= 70.0 for v in va)
    assert max(va) - min(va) > 10  # it does move


def test_walk_value_depends_on_time_not_call_order() -> None:
    a, b = parse_pattern("walk:0:100", seed=1), parse_pattern("walk:0:100", seed=1)
    late = a.at(100.5).utilization
    for t in range(100):
        b.at(float(t))
    assert b.at(100.5).utilization == late


def test_trace_interpolates_and_holds(tmp_path: Path) -> None:
    f = tmp_path / "load.csv"
    f.write_text("seconds,utilization,memory\n0,10,20\n10,30,40\n20,30,40\n")
    p = parse_pattern(f"trace:{f}")
    assert p.at(-5).utilization == 10
    assert p.at(5).utilization == pytest.approx(20)
    assert p.at(5).memory_percent == pytest.approx(30)
    assert p.at(100).utilization == 30


def test_patterns_one_per_gpu_last_repeats() -> None:
    pats = parse_patterns("constant:10,constant:20")
    assert [p.at(0).utilization for p in pats] == [10, 20]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "sine:1:2",
            f'mock pattern "sine:1:2" is malformed: sine takes MIN:MAX:PERIOD_S (3 values), got 2; '
            f"patterns are {PATTERN_SYNTAX}",
        ),
        (
            "zigzag:1",
            f'mock pattern "zigzag:1" is malformed: unknown kind "zigzag"; patterns are {PATTERN_SYNTAX}',
        ),
        ("constant:abc", 'mock pattern "constant:abc": u "abc" is not a number'),
        ("constant:150", 'mock pattern "constant:150": u 150 must be between 0 and 100'),
        ("square:10:20:0", 'mock pattern "square:10:20:0": period_s "0" must be greater than 0'),
        ("walk:80:20", 'mock pattern "walk:80:20": min 80 is above max 20'),
        ("trace:", 'mock pattern "trace:" is malformed: trace takes a CSV path, trace:PATH.csv'),
    ],
)
def test_malformed_patterns_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_pattern(spec)
    assert str(e.value) == message


def test_empty_entry_in_list() -> None:
    with pytest.raises(UsageError, match="has an empty entry"):
        parse_patterns("constant:1,,constant:2")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("0,10\n0,20\n", "line 2: seconds must increase"),
        ("0,10\n5,abc\n", "line 2: expected numbers"),
        ("0,10\n5,20,30\n", "expected 2 or 3 columns on every row"),
        ("0,120\n", "utilization 120 must be between 0 and 100"),
        ("", "has no rows"),
    ],
)
def test_bad_traces(tmp_path: Path, content: str, fragment: str) -> None:
    f = tmp_path / "t.csv"
    f.write_text(content)
    with pytest.raises(UsageError, match=fragment):
        parse_pattern(f"trace:{f}")


def test_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read trace file"):
        parse_pattern(f"trace:{tmp_path / 'nope.csv'}")
