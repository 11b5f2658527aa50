"""The cold-start learner: one observation per pod Ready transition, the median of the last few, bounded."""

from __future__ import annotations

import math

import pytest

from gpuscale.scaling.coldstart import MAX_COLD_START_S, ColdStarts


def test_median_of_the_pods_seen_becoming_ready() -> None:
    c = ColdStarts(keep=5)
    assert c.seconds("llm/vllm") is None
    for i, seconds in enumerate([120.0, 118.0, 900.0]):  # one pod on a cold node (a long image pull)
        assert c.observe("llm/vllm", f"p{i}", 1000.0, 1000.0 + seconds)
    assert c.seconds("llm/vllm") == 120.0
    assert dict(c) == {"llm/vllm": 120.0}


def test_a_pod_seen_again_counts_once_and_a_restart_counts_again() -> None:
    c = ColdStarts(keep=5)
    for _ in range(10):  # the API's list shows the same Ready pod every 15 s
        c.observe("w", "p", 0.0, 100.0)
    c.observe("w", "q", 0.0, 300.0)
    assert c.seconds("w") == 200.0  # median of [100, 300]: p counted once
    c.observe("w", "p", 400.0, 500.0)  # p restarted: a new Ready transition
    assert c.seconds("w") == 100.0  # [100, 300, 100]


def test_a_lasting_change_moves_it_within_half_the_window() -> None:
    c = ColdStarts(keep=5)
    for i in range(5):
        c.observe("w", f"a{i}", 0.0, 60.0)
    for i in range(3):
        c.observe("w", f"b{i}", 0.0, 240.0)  # a bigger model
    assert c.seconds("w") == 240.0


@pytest.mark.parametrize(
    "scheduled, ready", [(100.0, 100.0), (100.0, 50.0), (0.0, math.nan), (0.0, math.inf)]
)
def test_impossible_observations_are_ignored(scheduled: float, ready: float) -> None:
    c = ColdStarts()
    assert not c.observe("w", "p", scheduled, ready)
    assert c.seconds("w") is None


def test_bounded() -> None:
    c = ColdStarts(keep=2, max_workloads=3, max_pods=4)
    c.observe("w", "p", 0.0, 1e9)
    assert c.seconds("w") == MAX_COLD_START_S
    for i in range(10):
        c.observe(f"w{i}", "p", 0.0, 10.0)
    assert len(list(c)) == 3
    assert c.seconds("w") is None  # least recently observed forgotten
    with pytest.raises(ValueError):
        ColdStarts(keep=0)
