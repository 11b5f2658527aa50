"""``share: container`` when the agent cannot tell whose a GPU's processes are: a pod with none of the GPU's
processes uses 0 % only when every process is accounted for (some pod's); otherwise its share is unknown and
the pod is a missing pod ("share unknown"), never a made-up 0."""

from __future__ import annotations

import pytest

from gpuscale.model import GpuSample, ProcessSample
from gpuscale.scaling.aggregate import GpuSeries, extractor
from gpuscale.scaling.answer import GpuPod, answer
from gpuscale.scaling.errors import MissingPods
from gpuscale.scaling.metadata import parse_metadata
from gpuscale.scaling.view import WorkloadView

NOW = 1_000_000.0
BUSY = GpuSample(
    "GPU-x",
    NOW,
    gpu_utilization=80.0,
    processes=(ProcessSample(1, 1 << 30, 40.0), ProcessSample(2, 1 << 30, 40.0)),
    memory_total_bytes=80 << 30,
)
IDLE = GpuSample("GPU-x", NOW, gpu_utilization=0.0, memory_total_bytes=80 << 30)


@pytest.mark.parametrize(
    ("sample", "pids", "attributed", "expected"),
    [
        (BUSY, frozenset(), frozenset(), None),  # two holders, no process told: unknown
        (BUSY, frozenset(), frozenset({1}), None),  # process 2 may be this pod's
        (BUSY, frozenset(), frozenset({1, 2}), 0.0),  # both are other pods': this one uses 0 %
        (BUSY, frozenset({1}), frozenset({1}), 40.0),  # its own process, as the agent's series count it
        (BUSY, None, frozenset(), 80.0),  # the only holder: every process is its
        (BUSY, frozenset(), None, 0.0),  # no word on attribution: every process is accounted for
        (IDLE, frozenset(), frozenset(), 0.0),  # no process at all: nobody uses it
    ],
)
def test_a_pod_without_processes_on_a_gpu_is_0_only_when_every_process_is_accounted_for(
    sample: GpuSample, pids: frozenset[int] | None, attributed: frozenset[int] | None, expected: float | None
) -> None:
    assert extractor("gpu_utilization", "container", pids, attributed)(sample) == expected


@pytest.mark.parametrize("metric", ["memory_used", "memory_used_percent"])
def test_memory_shares_are_unknown_alike(metric: str) -> None:
    assert extractor(metric, "container", frozenset(), frozenset())(BUSY) is None  # type: ignore[arg-type]


def test_two_pods_time_slicing_a_gpu_whose_processes_no_cgroup_tells_are_missing() -> None:
    md = parse_metadata({"targetValue": "60", "window": "0", "share": "container"})
    series = [GpuSeries("GPU-x", [BUSY], f"ml/p{i}", frozenset(), frozenset()) for i in range(2)]
    pods = [GpuPod(f"ml/p{i}", "node-a") for i in range(2)]
    with pytest.raises(MissingPods) as info:
        answer(md, WorkloadView(series=series, pods=pods, name="ScaledObject ml/so"), now=NOW)
    assert str(info.value) == (
        "ScaledObject ml/so: 2 of 2 GPU pods have no fresh sample (none is fresh): node-a (share unknown: "
        "2 pods); KEDA keeps the replicas or applies its fallback"
    )
    whole = parse_metadata({"targetValue": "60", "window": "0"})
    assert answer(whole, WorkloadView(series=series, pods=pods), now=NOW).value == 160.0
