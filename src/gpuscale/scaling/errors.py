"""Errors of the scaling core: what a trigger means and what KEDA gets.

Hierarchy::

    GpuscaleError
    └── ScalingError             anything ``gpuscale.scaling`` raises on purpose
        ├── MetadataError        trigger metadata is invalid; ``problems`` lists every problem found, each
        │                        naming the key, the value and what is allowed (gRPC: INVALID_ARGUMENT)
        ├── SelectorError        a label selector string is invalid; ``problems`` names each bad part
        ├── ProfileError         a profiles file is invalid; ``problems`` names the profile and the field
        ├── NoDataError          no GPU in scope has a fresh sample of the metric (gRPC: UNAVAILABLE);
        │                        never answered with a made-up 0
        ├── UnattributedPods     workload scope: pods asking for a GPU run on GPU nodes, none has a GPU
        │                        attributed (gRPC: UNAVAILABLE), never a made-up 0
        ├── MissingPods          workload scope: no GPU pod is fresh, or more than maxMissingPercent
        │                        are missing (gRPC: UNAVAILABLE)
        └── RequestPathMissing   the workload has no Ready pod and its request path has no honest reading:
                                 unreachable, failing, not read yet (gRPC: UNAVAILABLE)

``MetadataError`` and ``ProfileError`` are raised only after every problem has been collected. The scaler
service maps them to gRPC codes (``gpuscale.scaler.status``); the simulator and ``render`` turn them into
their own path-naming messages.
"""

from __future__ import annotations

from ..errors import GpuscaleError

__all__ = [
    "MetadataError",
    "MissingPods",
    "NoDataError",
    "ProfileError",
    "RequestPathMissing",
    "ScalingError",
    "SelectorError",
    "UnattributedPods",
]

_NOT_ON_MIG = frozenset({"gpu_utilization", "memory_utilization"})


class ScalingError(GpuscaleError):
    """Base of the scaling core's errors."""


class MetadataError(ScalingError):
    """Trigger metadata is invalid. The message is one line: ``invalid trigger metadata: p1; p2; …``."""

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("invalid trigger metadata: " + "; ".join(problems))


class SelectorError(ScalingError):
    """A label selector string is invalid. Each problem names the bad requirement."""

    def __init__(self, text: str, problems: tuple[str, ...]) -> None:
        self.text = text
        self.problems = problems
        super().__init__(f'invalid label selector "{text}": ' + "; ".join(problems))


class ProfileError(ScalingError):
    """A profiles file is invalid. ``source`` names the file; ``problems`` lists every problem, in order."""

    def __init__(self, problems: tuple[str, ...], *, source: str = "profiles") -> None:
        self.problems = problems
        self.source = source
        count = len(problems)
        head = f"{source}: {count} problem{'s' if count != 1 else ''}"
        super().__init__(head + "".join(f"\n  {p}" for p in problems))


class NoDataError(ScalingError):
    """No GPU in scope has a usable sample. ``gpus`` counts the GPUs considered, ``stale`` those whose samples
    are all older than ``staleAfter``, ``unsupported`` those whose fresh samples lack the metric."""

    def __init__(self, metric: str, *, gpus: int, stale: int, unsupported: int, stale_after: float) -> None:
        self.metric = metric
        self.gpus = gpus
        self.stale = stale
        self.unsupported = unsupported
        self.stale_after = stale_after
        if gpus == 0:
            detail = "no GPU in scope"
        else:
            detail = (
                f"{gpus} GPU{'s' if gpus != 1 else ''} in scope: {stale} without a sample newer than "
                f"{stale_after:g} s, {unsupported} not reporting the metric"
            )
        if unsupported and metric in _NOT_ON_MIG:
            detail += (
                " (NVML reports no utilization for MIG instances, nor for a GPU in MIG mode: on MIG, scale "
                "on gr_engine_active or sm_active (Hopper and newer), or memory_used_percent)"
            )
        super().__init__(f'no data for metric "{metric}": {detail}')


class UnattributedPods(ScalingError):
    """Workload scope: the workload's pods run on nodes the agents follow, yet no GPU is attributed to any of
    them. Never a made-up 0 (which would scale the workload down): the agents may not be able to tell which
    GPUs the pods hold, or the pods have just started."""

    def __init__(self, workload: str, pods: int) -> None:
        self.pods = pods
        runs = "run" if pods != 1 else "runs"
        super().__init__(
            f"{workload}: {pods} pod{'s' if pods != 1 else ''} asking for a GPU {runs} on GPU nodes, but no "
            "GPU is attributed to any of them. Either they have just started (the agents ask the kubelet "
            "every few seconds), or the agents cannot tell which GPUs they hold: see the agents' logs (the "
            "kubelet's PodResources socket; for GPUs from ResourceClaims, the node's ResourceSlices)"
        )


class MissingPods(ScalingError):
    """Workload scope: too many of the workload's GPU pods have no fresh, attributed sample (all of them, or
    more than ``maxMissingPercent``). ``nodes`` names where they are and why. Never a made-up low value:
    KEDA keeps the replicas or applies its fallback."""

    def __init__(
        self, workload: str, *, missing: int, fresh: int, limit: float, nodes: tuple[str, ...]
    ) -> None:
        self.missing, self.fresh, self.limit, self.nodes = missing, fresh, limit, nodes
        total = missing + fresh
        why = "none is fresh" if fresh == 0 else f"more than maxMissingPercent ({limit:g} %)"
        super().__init__(
            f"{workload}: {missing} of {total} GPU pod{'s' if total != 1 else ''} have no fresh sample "
            f"({why}): {', '.join(nodes)}; KEDA keeps the replicas or applies its fallback"
        )


class RequestPathMissing(ScalingError):
    """Workload scope with ``requestPath``: no pod of the workload is there to speak (zero replicas) and its
    request path says nothing honest (``why``). Never a made-up 0: KEDA keeps the replicas or applies its
    fallback."""

    def __init__(self, workload: str, source: str, why: str) -> None:
        self.source, self.why = source, why
        super().__init__(
            f"{workload}: no pod is Ready and the request path ({source}) has no reading: {why}; KEDA keeps "
            "the replicas or applies its fallback"
        )
