"""The demo's router and its pods' engines: where the requests go, and how busy each pod's GPU reads."""

from __future__ import annotations

import pytest

from gpuscale.demo.engines import DemoEngines, least_loaded


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("loads", "demand", "expected"),
    [
        ({"a": 3.0, "b": 3.0, "c": 3.0}, 30.0, {"a": 10.0, "b": 10.0, "c": 10.0}),  # even load: even share
        # a backlog of 250 on one pod, four fresh pods: the fresh ones take all 42 req/s
        ({"a": 250.0, "b": 0.0, "c": 0.0, "d": 0.0, "e": 0.0}, 42.0, {"a": 0, "b": 10.5, "c": 10.5, "d": 10.5, "e": 10.5}),
        # the arrivals of the second fill b up to c, then both rise together
        ({"a": 100.0, "b": 0.0, "c": 10.0}, 30.0, {"a": 0.0, "b": 20.0, "c": 10.0}),
        ({"a": 5.0, "b": 0.0}, 0.0, {"a": 0.0, "b": 0.0}),  # no demand
    ],
)  # fmt: skip
def test_each_request_goes_to_the_least_loaded_pod(
    loads: dict[str, float], demand: float, expected: dict[str, float]
) -> None:
    rates = least_loaded(demand, loads, horizon_s=1.0)
    assert rates == pytest.approx(expected)
    assert sum(rates.values()) == pytest.approx(demand)  # every request goes somewhere


async def test_a_backlog_on_one_pod_drains_while_the_others_take_the_demand() -> None:
    """One Ready pod takes a burst alone (a queue of some 180 builds); four more become Ready and the demand drops
    below what the five serve. The backlog drains at that pod's full 10 req/s, the others serving the
    demand: within 30 s nothing waits. (Shared evenly, the pod would get 8 of its 10 req/s and drain
    at 2 req/s: over 100 would still wait.)"""
    clock = Clock()
    engines = DemoEngines(capacity_per_replica=10.0, clock=clock)
    pods = [f"llm-{n}" for n in range(1, 6)]
    for pod in pods:
        engines.create(pod)
    try:

        def run(seconds: float, demand: float, ready: set[str]) -> None:
            for _ in range(round(seconds / 0.25)):
                clock.now += 0.25
                engines.route(demand, {pod: pod in ready for pod in pods})

        run(10.0, 30.0, {"llm-1"})
        assert engines.waiting() > 150.0
        assert engines.busy_percent("llm-1") == pytest.approx(100.0)
        assert engines.busy_percent("llm-2") == 0.0

        run(30.0, 40.0, set(pods))
        assert engines.waiting() == pytest.approx(0.0, abs=1.0)
        busy = [engines.busy_percent(pod) for pod in pods]
        assert busy == pytest.approx([80.0] * 5, abs=5.0)  # 40 req/s over five pods serving 10 each
    finally:
        await engines.close()
