"""The ``bursts`` demand shape: random bursts and gaps drawn once from a seed, each within its range, and every
bad field named with its value and what is allowed."""

from __future__ import annotations

import itertools

import pytest

from gpuscale.sim import ScenarioError, parse_scenario
from gpuscale.sim.workload import BurstsDemand, demand_series, step_time


def _draw(seed: int = 0, until: int = 3600, start: int | None = None) -> BurstsDemand:
    return BurstsDemand.draw(
        3.4, (10, 60), (5.0, 15.0), (60, 300), (0.0, 1.0), until=until, start_seconds=start, seed=seed
    )


def _phases(shape: BurstsDemand) -> list[tuple[str, int, int, float]]:
    return sorted(
        [("gap", *g) for g in shape.gaps] + [("burst", *b) for b in shape.bursts], key=lambda p: (p[1], p[2])
    )


def test_a_seed_gives_the_same_demand_and_another_seed_another() -> None:
    assert _draw(seed=7) == _draw(seed=7)
    assert demand_series(_draw(seed=7), 3600) == demand_series(_draw(seed=7), 3600)
    assert demand_series(_draw(seed=7), 3600) != demand_series(_draw(seed=8), 3600)
    assert _draw(seed=7).bursts != _draw(seed=8).bursts


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 12345])
def test_every_burst_and_gap_is_within_its_range_and_they_alternate_to_the_end(seed: int) -> None:
    shape = _draw(seed=seed)
    phases = _phases(shape)
    assert [p[0] for p in phases] == ["gap", "burst"] * (len(phases) // 2) + ["gap"] * (len(phases) % 2)
    assert phases[0][1] == 0
    for (_, start, seconds, _), (_, following, _, _) in itertools.pairwise(phases):
        assert following == start + seconds  # back to back, no hole, no overlap
    assert phases[-1][1] < 3600 <= phases[-1][1] + phases[-1][2]  # the last one covers the last second
    assert len(shape.bursts) >= 3600 // (60 + 300)
    for _, seconds, value in shape.bursts:
        assert 10 <= seconds <= 60 and 5 * 3.4 <= value <= 15 * 3.4
    for _, seconds, value in shape.gaps:
        assert 60 <= seconds <= 300 and 0 <= value <= 1
    for kind, start, seconds, value in phases:
        assert [shape.at(t) for t in (start, start + seconds // 2, start + seconds - 1)] == [value] * 3, kind


def test_the_first_burst_comes_after_start_seconds_and_a_longer_horizon_draws_more_of_the_same() -> None:
    assert _draw(start=120).bursts[0][0] == 120
    assert _draw(start=0).bursts[0][0] == 0 and _draw(start=0).at(0) == _draw(start=0).bursts[0][2]
    short, long = _draw(until=600), _draw(until=7200)
    assert long.bursts[: len(short.bursts)] == short.bursts
    assert demand_series(long, 600) == demand_series(short, 600)
    # "the step" of time-to-first-scale-up is the first burst
    assert step_time(short, demand_series(short, 600)) == short.bursts[0][0]


def test_past_the_last_phase_drawn_its_value_holds_and_before_zero_the_first() -> None:
    shape = BurstsDemand(bursts=((10, 5, 40.0),), gaps=((0, 10, 1.0), (15, 20, 0.0)))
    assert [shape.at(t) for t in (-1, 0, 9, 10, 14, 15, 34, 35, 10_000)] == [1, 1, 1, 40, 40, 0, 0, 0, 0]


def test_a_burst_of_zero_seconds_is_refused_where_it_is_drawn() -> None:
    with pytest.raises(ValueError, match=r"a burst lasts at least 1 second"):
        BurstsDemand.draw(1, (0, 5), (1, 2), (0, 0), (0, 0), until=10)


SCENARIO = """
name: s
durationSeconds: 3600
workload: {capacityPerReplica: 8}
demand:
  shape: bursts
  base: 3.4
  burstSeconds: [10, 60]
  burstMultiple: [5, 15]
  gapSeconds: [60, 300]
  gapDemand: [0, 1]
EXTRA
policies:
  - name: oracle
    oracle: {minReplicas: 0, maxReplicas: 8}
"""


def _scenario(extra: str = "") -> str:
    return SCENARIO.replace("EXTRA\n", extra + ("\n" if extra else ""))


def test_a_scenario_draws_from_its_seed_to_its_duration() -> None:
    parsed = parse_scenario(_scenario())
    assert parsed.demand == _draw(seed=0)  # seed 0 and one gap before the first burst: the defaults
    assert parse_scenario(_scenario("  seed: 3")).demand == _draw(seed=3)
    assert parse_scenario(_scenario("  startSeconds: 30")).demand == _draw(start=30)
    shorter = parse_scenario(_scenario().replace("durationSeconds: 3600", "durationSeconds: 600"))
    assert shorter.demand == _draw(until=600)


def _problems(text: str) -> tuple[str, ...]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text)
    return info.value.problems


SECONDS = "must be a pair [low, high] of integers >= {}, low <= high"
NUMBERS = "must be a pair [low, high] of numbers >= 0, low <= high"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "burstSeconds: [10, 60]",
            "burstSeconds: [60, 10]",
            f'demand.burstSeconds: value "[60, 10]" {SECONDS.format(1)}',
        ),
        (
            "burstSeconds: [10, 60]",
            "burstSeconds: [0, 60]",
            f'demand.burstSeconds: value "[0, 60]" {SECONDS.format(1)}',
        ),
        (
            "burstSeconds: [10, 60]",
            "burstSeconds: [10.5, 60]",
            f'demand.burstSeconds: value "[10.5, 60]" {SECONDS.format(1)}',
        ),
        (
            "burstSeconds: [10, 60]",
            "burstSeconds: 30",
            f'demand.burstSeconds: value "30" {SECONDS.format(1)}',
        ),
        (
            "burstSeconds: [10, 60]",
            "burstSeconds: [10, 20, 60]",
            f'demand.burstSeconds: value "[10, 20, 60]" {SECONDS.format(1)}',
        ),
        (
            "burstSeconds: [10, 60]",
            "burstSeconds: [true, 60]",
            f'demand.burstSeconds: value "[True, 60]" {SECONDS.format(1)}',
        ),
        ("burstSeconds: [10, 60]", "", "demand.burstSeconds: is required"),
        (
            "burstMultiple: [5, 15]",
            "burstMultiple: [15, 5]",
            f'demand.burstMultiple: value "[15, 5]" {NUMBERS}',
        ),
        (
            "burstMultiple: [5, 15]",
            "burstMultiple: [-1, 5]",
            f'demand.burstMultiple: value "[-1, 5]" {NUMBERS}',
        ),
        (
            "burstMultiple: [5, 15]",
            "burstMultiple: [5, .inf]",
            f'demand.burstMultiple: value "[5, inf]" {NUMBERS}',
        ),
        (
            "burstMultiple: [5, 15]",
            "burstMultiple: [five, 15]",
            f"demand.burstMultiple: value \"['five', 15]\" {NUMBERS}",
        ),
        (
            "gapSeconds: [60, 300]",
            "gapSeconds: [300, 60]",
            f'demand.gapSeconds: value "[300, 60]" {SECONDS.format(0)}',
        ),
        (
            "gapSeconds: [60, 300]",
            "gapSeconds: [-60, 300]",
            f'demand.gapSeconds: value "[-60, 300]" {SECONDS.format(0)}',
        ),
        ("gapDemand: [0, 1]", "gapDemand: [1, 0]", f'demand.gapDemand: value "[1, 0]" {NUMBERS}'),
        (
            "gapDemand: [0, 1]",
            "gapDemand: {low: 0, high: 1}",
            f"demand.gapDemand: value \"{{'low': 0, 'high': 1}}\" {NUMBERS}",
        ),
        ("base: 3.4", "base: -3.4", 'demand.base: value "-3.4" must be a number >= 0'),
        ("base: 3.4", "", "demand.base: is required"),
        ("base: 3.4", "base: 3.4\n  seed: 1.5", 'demand.seed: value "1.5" must be an integer >= 0'),
        ("base: 3.4", "base: 3.4\n  seed: -1", 'demand.seed: value "-1" must be an integer >= 0'),
        (
            "base: 3.4",
            "base: 3.4\n  startSeconds: -5",
            'demand.startSeconds: value "-5" must be an integer >= 0',
        ),
        (
            "base: 3.4",
            "base: 3.4\n  value: 5",
            "demand.value: unknown field; allowed: [base, burstMultiple, burstSeconds, gapDemand, gapSeconds, "
            "seed, shape, startSeconds, stepAtSeconds]",
        ),
    ],
)
def test_a_bad_field_is_named_with_its_value_and_what_is_allowed(old: str, new: str, expected: str) -> None:
    text = _scenario()
    assert old in text
    assert _problems(text.replace(old, new)) == (expected,)


def test_every_bad_field_is_reported_at_once() -> None:
    text = (
        _scenario("  seed: x")
        .replace("burstSeconds: [10, 60]", "burstSeconds: [60, 10]")
        .replace("gapDemand: [0, 1]", "gapDemand: [0]")
    )
    assert _problems(text) == (
        f'demand.burstSeconds: value "[60, 10]" {SECONDS.format(1)}',
        f'demand.gapDemand: value "[0]" {NUMBERS}',
        'demand.seed: value "x" must be an integer >= 0',
    )
