"""What KEDA gets for one trigger: ``answer`` turns the GPU series a trigger's scope holds into the value
(``GetMetrics``) and the activity (``IsActive``), or the error that says why there is none.

The rules of a workload as a whole live here, once, for the scaler and the simulator alike:

* a workload with no pod on a GPU node (scaled to zero, or every pod Pending) reports **0 and inactive**:
  there is nothing to measure, and KEDA's activation from zero needs another trigger;
* a workload whose pods ask for a GPU and run on GPU nodes, none with an attributed GPU, is
  ``UnattributedPods`` (``UNAVAILABLE``), never a made-up 0;
* otherwise ``aggregate.evaluate``: smoothing per GPU, aggregation, and ``aggregate * pods`` in workload
  scope (``NoDataError`` when no GPU has a fresh sample).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .aggregate import Evaluation, GpuSeries, evaluate
from .errors import UnattributedPods
from .metadata import TriggerMetadata

__all__ = ["NO_PODS", "answer"]

NO_PODS = Evaluation(
    value=0.0, aggregate=0.0, active=False, gpus=0, pods=0, skipped=0, newest_sample_age=math.inf
)


def answer(
    md: TriggerMetadata,
    series: Sequence[GpuSeries],
    *,
    now: float,
    gpu_pods: int = 0,
    workload: str = "the workload",
) -> Evaluation:
    """The answer for ``md`` over ``series`` at ``now`` (Unix seconds). ``gpu_pods``: in workload scope, how
    many of the workload's pods on GPU nodes ask for a GPU; ``workload`` names it in errors. Raise
    ``UnattributedPods`` or ``NoDataError`` where there is no honest value."""
    if md.scope == "workload" and not series:
        if gpu_pods:
            raise UnattributedPods(workload, gpu_pods)
        return NO_PODS
    return evaluate(md, series, now=now)
