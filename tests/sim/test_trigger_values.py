"""What a simulated gpuscale trigger reports, against what the scaler answers in the same state."""

from __future__ import annotations

from gpuscale.sim import parse_scenario
from gpuscale.sim.engine import _Run, _trigger_value
from gpuscale.sim.hpa import HpaState
from gpuscale.sim.keda import KedaState
from gpuscale.sim.workload import Pod

from .test_scenario_errors import HEAD, _gpuscale_policy

SCENARIO = HEAD + _gpuscale_policy('{scalerAddress: a, targetValue: "60"}')


def _run(pods: tuple[Pod, ...]) -> _Run:
    return _Run(pods, 0, len(pods), HpaState(), KedaState(None, 0, (0,)), (None,), [])


def test_no_pod_sampled_is_zero_and_inactive_as_the_scaler_answers() -> None:
    policy = parse_scenario(SCENARIO).policies[0]
    (src,) = policy.sources
    # scaled to zero: the scaler finds no pod of the workload and answers 0, inactive (no error)
    assert _trigger_value(policy, src, _run(()), 10) == (0.0, 0.0)
    # a pod Pending (scheduling, pulling its image): on no node yet, or its GPU allocated and at 0 %: 0 too
    assert _trigger_value(policy, src, _run((Pod(0, 5, 100, 200),)), 10) == (0.0, 0.0)
