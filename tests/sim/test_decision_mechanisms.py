"""The demand-based decisions through the simulator (the scaler's own code deciding, fed what the agents and
the API would give it): the demand with starting pods as coming capacity, the forecast one learned cold start
ahead on a known ramp, the N-1 guard, and GPU utilization uncapped by the engines' demand."""

from __future__ import annotations

import pytest

from gpuscale.sim import Result, parse_scenario, run_scenario

from .scenario_text import GPUSCALE, external, head, policy

WORKLOAD = (
    "{capacityPerReplica: 5, provisioningSeconds: 30, loadSeconds: 90, initialReplicas: 2, maxQueueSeconds: 60, "
    "requestSeconds: 4}"
)
FAST_DOWN = """
advanced:
  horizontalPodAutoscalerConfig:
    behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
"""


def _scenario(points: str, duration: int) -> str:
    demand = f"{{shape: points, interpolation: linear, points: {points}}}"
    return head(name="mechanisms", duration=duration, workload=WORKLOAD, demand=demand)


def _policy(
    name: str, metadata: str, *, pipeline: str = GPUSCALE, max_replicas: int = 40, behavior: str = ""
) -> str:
    """A policy scaling vllm (1 to ``max_replicas`` replicas) on one gpuscale trigger, its HPA syncs offset 4 s."""
    return policy(
        external(f"{{scalerAddress: s:1, {metadata}}}"),
        name=name,
        target="vllm",
        pipeline=pipeline,
        keys=["hpaSyncOffsetSeconds: 4"],
        spec=["minReplicaCount: 1", f"maxReplicaCount: {max_replicas}", *([behavior] if behavior else [])],
    )


def _run(points: str, duration: int, behavior: str = "") -> Result:
    # the two policies differ only in their name and scaleAhead
    policies = "".join(
        _policy(name, f'metric: request_rate, targetValue: "4", scaleAhead: "{ahead}"', behavior=behavior)
        for name, ahead in (("engine", "off"), ("ahead", "auto"))
    )
    return run_scenario(parse_scenario(_scenario(points, duration) + policies))


def test_on_a_known_ramp_the_forecast_asks_one_cold_start_ahead() -> None:
    """Demand rises 0.1 requests/s every second from 6 at 300 s. The cold start, learned from the pods
    (30 s Pending + 90 s loading), is 120 s; once the look-back holds the ramp, the `ahead` policy asks for
    the replicas of the demand 120 s later (ceil(demand(t + 120) / 4)) and the plain one for today's."""
    result = _run("[[0, 6], [300, 6], [900, 66]]", 900)
    plain, ahead = result.timelines

    def demand(t: float) -> float:
        return 6.0 if t < 300 else 6.0 + 0.1 * (t - 300)

    for t in (604, 694, 784):  # HPA syncs on the ramp, more than a look-back into it
        assert plain.metric[t] <= demand(t)  # today's demand (the window's mean)
        assert ahead.metric[t] >= demand(t + 100)  # the demand of 100-120 s later
        assert ahead.desired[t] > plain.desired[t]
    # and before the ramp (a steady level) both ask the same
    assert ahead.desired[289] == plain.desired[289]
    # capacity arrives when the demand does: over the ramp's second half the ahead policy is short of it for
    # a few seconds (the HPA's tolerance band), the plain one for most of it
    short_ahead = sum(1 for t in range(600, 900) if ahead.capacity[t] < demand(t))
    short_plain = sum(1 for t in range(600, 900) if plain.capacity[t] < demand(t))
    assert short_ahead <= 30 < 200 <= short_plain


def test_a_burst_with_pods_loading_asks_once() -> None:
    """6 -> 40 requests/s at 300 s: the demand reads 40 however long the queue grows while the new pods
    load, so the replicas go 2 -> 4 -> 8 -> 10 (the legacy rate limit, then ceil(40 / 4)) and stop there."""
    plain, _ = _run("[[0, 6], [300, 6], [301, 40]]", 900).timelines
    ups = sorted({plain.desired[t] for t in range(300, 900)})
    assert ups == [2, 4, 8, 10]


def test_the_n_minus_1_guard_in_the_simulator() -> None:
    """20 requests/s (5 replicas at 4), a 5 s dip to 8 ending 2 s before an HPA sync (424 s, once the queue
    built while the first replicas loaded has drained), then 20 again: at that sync the 10 s window's mean
    is about 14, ceil(14 / 4) = 4, but 4 replicas at the target do not carry the 20 arriving now: the answer
    keeps 5, with the HPA's scale-down window at 0. A sync within the dip (the demand truly lower) lets it
    go lower: the guard holds the present demand, not the past."""
    points = "[[0, 20], [415, 20], [416, 8], [421, 8], [422, 20], [600, 20]]"
    plain, _ = _run(points, 600, FAST_DOWN).timelines
    assert plain.waiting[400] == 0  # the backlog is gone: the N-1 guard, not the backlog hold, decides
    assert plain.metric[424] == pytest.approx(20.0)  # the guard: the present demand, not the window's 14
    assert all(plain.desired[t] >= 5 for t in range(60, 600))
    dipped, _ = _run(
        "[[0, 20], [410, 20], [411, 8], [430, 8], [431, 20], [600, 20]]", 600, FAST_DOWN
    ).timelines
    assert dipped.desired[424] < 5


def test_steady_load_never_reverses() -> None:
    """A steady 23 requests/s: both policies settle on ceil(23 / 4) = 6 at the first syncs and never move."""
    result = _run("[[0, 23], [1200, 23]]", 1200)
    for tl in result.timelines:
        assert set(tl.desired[60:]) == {6}


def _gpu_policy(name: str, read_engines: bool, max_replicas: int = 40) -> str:
    return _policy(
        name,
        'metric: gpu_utilization, targetValue: "70", scope: workload',
        pipeline=f"{{gpuscale: {{samplingIntervalSeconds: 1, readEngines: {str(read_engines).lower()}}}}}",
        max_replicas=max_replicas,
    )


def test_utilization_pinned_at_100_is_uncapped_where_the_engines_are_read() -> None:
    """6 -> 40 requests/s at 300 s on 2 replicas of 5: their GPUs read 100 % however far the demand is
    beyond them, so the plain GPU trigger climbs one cold start at a time (2 -> 3 -> 5 -> 8 -> 12, each
    step's pods loading before the next utilization can say more). Where the agents also read the engines,
    the answer is the utilization the demand would take (100 % x 2 x 40 / 10 served = 800): it asks for
    ceil(800 / 70) = 12 at the first sync, reached at the legacy rate limit (2 -> 4 -> 8 -> 12)."""
    policies = _gpu_policy("gpu", read_engines=False) + _gpu_policy("engines", read_engines=True)
    result = run_scenario(parse_scenario(_scenario("[[0, 6], [300, 6], [301, 40]]", 900) + policies))
    gpu, engines = result.timelines
    # until the first new pods are Ready (439 s): later, 12 Ready pods at 100 % draining the backlog ask
    # ceil(1200 / 70) = 18, as any utilization trigger does (a draining queue is never uncapped)
    assert sorted({engines.desired[t] for t in range(300, 439)}) == [2, 4, 8, 12]
    assert max(engines.desired[300:350]) == 12  # within the first three syncs after the step
    assert max(gpu.desired[300:420]) == 3  # a cold start later it is still climbing
    plain, uncapped = result.summaries
    assert uncapped.share_of_demand_unserved < plain.share_of_demand_unserved / 2


@pytest.mark.parametrize("counted", [True, False])
def test_the_uncapped_answer_while_the_queue_sheds_requests(counted: bool) -> None:
    """The same step with the replicas held at 2 (maxReplicaCount 2): after 60 s the queue is at its timeout
    and sheds 30 requests/s. Where the engines count those as aborts (``abortsCounted``: finished with reason
    "abort", the fix proposed in vllm-project/vllm#55837), served is finished less aborted and the arrivals
    are finished plus growth. Released vLLM counts no client abort (vllm-project/vllm#31503): finished plus
    growth reads only what is served, and the arrivals come from the queue itself, by Little's law (2400
    waiting over the 60 s the started requests waited: 40). Either way the answer stays the demand's
    utilization, 800, as long as the overload lasts."""
    text = _scenario("[[0, 6], [300, 6], [301, 40]]", 900) + _gpu_policy("capped", True, max_replicas=2)
    text = text.replace("requestSeconds: 4}", f"requestSeconds: 4, abortsCounted: {str(counted).lower()}}}")
    (tl,) = run_scenario(parse_scenario(text)).timelines
    assert sum(tl.unserved[400:900]) > 0  # the queue sheds requests
    assert tl.metric[349] == pytest.approx(800.0, rel=0.05)  # before it does, both read the demand
    late = [tl.metric[t] for t in range(439, 900, 15)]
    assert all(v == pytest.approx(800.0, rel=0.05) for v in late), late
