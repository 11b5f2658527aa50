"""What a simulated gpuscale trigger reports, against what the scaler answers in the same state."""

from __future__ import annotations

from gpuscale.sim import parse_scenario
from gpuscale.sim.hpa import HpaState
from gpuscale.sim.keda import KedaState
from gpuscale.sim.run import RunState
from gpuscale.sim.scaler import trigger_value
from gpuscale.sim.workload import Pod

from .scenario_text import GPUSCALE, external, head, policy

SCENARIO = head() + policy(
    external('{scalerAddress: a, targetValue: "60"}'),
    name="g",
    pipeline=GPUSCALE,
)


def _run(pods: tuple[Pod, ...]) -> RunState:
    return RunState(pods, 0, len(pods), HpaState(), KedaState(None, 0, (0,)), (None,), [])


def test_no_pod_sampled_is_zero_and_inactive_as_the_scaler_answers() -> None:
    policy = parse_scenario(SCENARIO).policies[0]
    (src,) = policy.sources
    # scaled to zero: the scaler finds no pod of the workload and answers 0, inactive (no error)
    assert trigger_value(policy, src, _run(()), 10) == (0.0, 0.0)
    # a pod Pending (scheduling, pulling its image): on no node yet, or its GPU allocated and at 0 %: 0 too
    assert trigger_value(policy, src, _run((Pod(0, 5, 100, 200),)), 10) == (0.0, 0.0)
