"""One table of triggers x GPU states, answered by the scaler service (its real ClusterState fed with the
agents' Watch messages, over real gRPC on loopback) and by the simulator (its scenario parser and the reading
its engine makes of the samples it holds): the same values and the same activity, or UNAVAILABLE for both.

The simulator imports no copy of the trigger rules (``gpuscale.scaling`` decides for both), so this holds by
construction; the test keeps it so when either side changes how it feeds the core. Every other metric, the
engines, loading, deleted and missing pods, the learned cold start:
``test_scaler_and_simulator_agree_engines`` (built by ``_agree`` and ``_agree_scaler``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gpuscale._proto import agent_pb2
from gpuscale.model import GpuSample
from gpuscale.scaler.state import ClusterState
from gpuscale.sim.scaler import gpuscale_reading, gpuscale_series
from tests.scaling._agree import NOW, NS, trigger
from tests.scaling._agree_scaler import Served, ask, reset, serve

# A GPU state: per pod, its GPU's samples as (age in seconds, utilization); None: the pod runs on a GPU node
# but no GPU is attributed to it.
State = dict[str, list[tuple[float, float]] | None]

STATES: dict[str, State] = {
    "no pods": {},
    "one busy pod": {"llm-0": [(0.5, 80.0)]},
    "three pods, fresh": {"llm-0": [(0.5, 90.0)], "llm-1": [(0.5, 40.0)], "llm-2": [(0.5, 10.0)]},
    "history in and out of the window": {
        "llm-0": [(40.0, 100.0), (12.5, 100.0), (9.5, 60.0), (4.5, 70.0), (0.5, 80.0)],
        "llm-1": [(20.5, 5.0), (6.5, 30.0), (1.5, 50.0)],
    },
    "one pod loading at 0": {"llm-0": [(0.5, 95.0)], "llm-1": [(1.5, 0.0), (0.5, 0.0)]},
    "one pod stale": {"llm-0": [(0.5, 70.0)], "llm-1": [(45.5, 70.0)]},
    "every pod stale": {"llm-0": [(31.0, 70.0)], "llm-1": [(60.5, 70.0)]},
    "newest sample outside a short window": {"llm-0": [(8.5, 30.0), (7.5, 50.0)]},
    "pods without an attributed GPU": {"llm-0": None, "llm-1": None},
}
TRIGGERS: dict[str, dict[str, str]] = {
    "defaults": {"targetValue": "60"},
    "max": {"targetValue": "60", "aggregation": "max"},
    "min": {"targetValue": "60", "aggregation": "min"},
    "p90": {"targetValue": "60", "aggregation": "p90"},
    "window 0": {"targetValue": "60", "window": "0"},
    "window 5": {"targetValue": "60", "window": "5"},
    "window 2.5, staleAfter 9": {"targetValue": "60", "window": "2.5", "staleAfter": "9"},
    "activation 50": {"targetValue": "60", "activationValue": "50"},
    "profile llm-serving": {"profile": "llm-serving"},
    "profile online-inference, target given": {"profile": "online-inference", "targetValue": "45"},
}


def _state(state: State) -> ClusterState:
    cluster = ClusterState(history_s=120.0)
    update = agent_pb2.NodeUpdate(
        kind=agent_pb2.NodeUpdate.SNAPSHOT, node_name="node-1", agent_id="a1", interval_seconds=1.0
    )
    for pod, samples in state.items():
        update.pods.add(namespace=NS, name=pod, uid=pod, labels={"app": "llm"}, wants_gpu=True)
        if samples is None:
            continue
        gpu = update.gpus.add(device=agent_pb2.Device(uuid=f"GPU-{pod}", name="H100"))
        for age, util in sorted(samples, reverse=True):
            gpu.samples.add(timestamp=NOW - age, gpu_utilization=util)
        gpu.attributions.add(
            namespace=NS, pod=pod, container="main", resource_name="nvidia.com/gpu", device_id=f"GPU-{pod}"
        )
    cluster.apply(update)
    return cluster


def _simulator(metadata: dict[str, str], state: State) -> tuple[float | None, bool]:
    history = {
        pod: [
            GpuSample(f"GPU-{pod}", NOW - age, gpu_utilization=u) for age, u in sorted(samples, reverse=True)
        ]
        for pod, samples in state.items()
        if samples is not None
    }
    # the engine's series hold the Running pods with samples: a pod without an attributed GPU is one the
    # simulator never has (its pods always hold their GPU), so that state is the scaler's alone
    return gpuscale_reading(trigger(metadata), gpuscale_series(history, NOW), NOW)


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[Served]:
    async with serve() as s:
        yield s


async def _scaler(served: Served, metadata: dict[str, str], state: State) -> tuple[float | None, bool]:
    reset(served, _state(state))
    return await ask(served, metadata)


@pytest.mark.parametrize("state", STATES, ids=list(STATES))
@pytest.mark.parametrize("trigger", TRIGGERS, ids=list(TRIGGERS))
async def test_the_scaler_and_the_simulator_answer_alike(served: Served, trigger: str, state: str) -> None:
    metadata, gpus = TRIGGERS[trigger], STATES[state]
    scaler = await _scaler(served, metadata, gpus)
    if any(s is None for s in gpus.values()):
        assert scaler == (None, False)  # UNAVAILABLE: pods that ask for a GPU, none attributed
        return
    assert _simulator(metadata, gpus) == scaler


async def test_the_table_covers_values_activity_and_unavailable(served: Served) -> None:
    """The table is not vacuous: it holds active and inactive answers, non-zero values and UNAVAILABLE."""
    answers = [await _scaler(served, m, s) for m in TRIGGERS.values() for s in STATES.values()]
    assert {a[1] for a in answers} == {True, False}
    assert any(a[0] is None for a in answers) and any(a[0] for a in answers)
    assert (0.0, False) in answers  # no pods: 0 and inactive, by both
    # three pods at 90, 40, 10, target 60: avg 46.7 x 3 pods = 140, the HPA's ceil(140 / 60) = 3
    assert await _scaler(served, TRIGGERS["defaults"], STATES["three pods, fresh"]) == (
        pytest.approx(140.0),
        True,
    )
