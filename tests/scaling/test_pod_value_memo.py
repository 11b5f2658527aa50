"""``pod_value_at`` with a memo gives exactly ``pod_value``: on readings that grow at the end and are dropped
at the front, as the simulator keeps them, for every engine metric, at instants before, inside and past the
readings held."""

from __future__ import annotations

import random

import pytest

from gpuscale.model import EngineSample, ModelSignals
from gpuscale.scaling.engine import pod_value, pod_value_at
from gpuscale.scaling.metadata import parse_metadata


def _reading(t: float, rng: random.Random, finished: float, restarted: bool) -> EngineSample:
    waiting = float(rng.randint(0, 9))
    return EngineSample(
        t,
        "vllm",
        (
            ModelSignals(
                "m",
                waiting=waiting,
                running=float(rng.randint(0, 4)),
                kv_cache_usage=rng.random(),
                requests_finished=0.0 if restarted else finished,
                requests_aborted=0.0,
                queue_time_sum=finished * 0.3,
                queue_time_count=finished,
            ),
        ),
    )


@pytest.mark.parametrize("metric", ["request_rate", "queue_length", "kv_cache_usage", "requests_in_flight"])
def test_a_memo_never_changes_a_value(metric: str) -> None:
    md = parse_metadata(
        {"metric": metric, "targetValue": "5", "window": "10", "staleAfter": "15", "podSelector": "app=x"}
    )
    rng = random.Random(7)
    readings: list[EngineSample] = []
    memo: dict[float, float | None] = {}
    finished = 0.0
    reused = 0
    for step in range(400):
        t = float(step)
        finished += rng.randint(0, 6)
        readings.append(_reading(t, rng, finished, restarted=step == 200))
        if len(readings) > 60:  # dropped at the front, as the simulator keeps a horizon
            del readings[:20]
        if step % 3:
            continue
        # instants asked again three steps later (-3 then 0), and after the front was dropped (0 then 45, 60)
        for back in (-3.0, 0.0, 0.5, 3.0, 14.9, 15.0, 30.0, 45.0, 60.0):
            at = t - back
            held = list(readings)
            before = len(memo)
            assert pod_value_at(md, held, at, memo) == pod_value(md, held, at), (step, at)
            reused += len(memo) == before and at in memo
    assert reused > 100  # the memo was used, not only filled
