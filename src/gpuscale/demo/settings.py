"""What ``run_demo`` takes and gives back: its settings, and its result (the files, the rows, what the
scaler decided, what the gateway saw, how a workload woke from zero behind it, what the real vLLM did).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..vllmcpu import Engine
from .controller import ReplicaChange
from .gateway import GatewayStats
from .output import Row
from .realvllm import VllmSummary

__all__ = ["DemoResult", "DemoSettings", "Wake", "wake_of"]


@dataclass(frozen=True)
class DemoSettings:
    out_dir: Path
    duration: float = 60.0
    pattern: str = "burst"
    profile: str = "online-inference"
    live: bool = False  # the rich view; else a line every ``plain_every`` seconds
    plain_every: float = 5.0
    nodes: tuple[str, ...] = ("node-a", "node-b", "node-c")
    gpus_per_node: int = 2
    capacity_per_replica: float = 10.0  # requests/s one Ready replica serves at 100 % GPU
    pending_s: float = 1.5
    loading_s: float = 2.5
    polling_interval: int = 5
    sync_period: int = 5
    cooldown_period: int = 10
    scale_down_window: int = 10
    window: str = "2"  # trigger metadata: seconds of samples per GPU (profiles use 10-120 s)
    agent_interval: str = "0.5"
    startup_timeout_s: float = 60.0
    tick_s: float = 0.25
    hold_timeout_s: float = 60.0  # how long the gateway holds a request for want of a Ready pod
    extra_metadata: dict[str, str] = field(default_factory=dict)
    vllm: Engine | None = None  # --engine vllm: the installed real vLLM, one pod's engine once healthy


@dataclass(frozen=True)
class Wake:
    """How the workload woke from zero behind the gateway, in the demo's seconds: its first request, KEDA's
    activation (0 → 1), the HPA's first scale-up after it (to what the scaler asked), the first Ready pod.
    ``None``: did not happen within the run."""

    first_request: float
    activated: ReplicaChange | None
    scaled: ReplicaChange | None
    first_ready: float | None


def wake_of(
    first_request: float | None, changes: Sequence[ReplicaChange], first_ready: float | None
) -> Wake | None:
    """The wake from the replica changes: the first 0 → N at or after the first request, and the HPA's first
    scale-up after it. ``None`` without a request."""
    if first_request is None:
        return None
    activated = next((c for c in changes if c.old == 0 and c.new > 0 and c.t >= first_request), None)
    scaled = None
    if activated is not None:
        scaled = next((c for c in changes if c.t >= activated.t and c.by == "HPA" and c.new > c.old), None)
    ready = first_ready if first_ready is not None and first_ready >= first_request else None
    return Wake(first_request, activated, scaled, ready)


@dataclass(frozen=True)
class DemoResult:
    timeline: Path
    plot: Path | None
    logs: Path
    rows: tuple[Row, ...]
    interrupted: bool
    # with engines: the agents' gpuscale_agent_engine_scrapes_total{result="ok"}, read before they stopped
    engine_scrapes_ok: int | None = None
    # how often each of the scaler's decisions shaped an answer ("ahead", "KV-cache guard", "N-1 guard", …)
    decisions: dict[str, int] = field(default_factory=dict)
    gateway: GatewayStats | None = None  # with an engine profile: what the stand-in gateway saw
    wake: Wake | None = None
    vllm: VllmSummary | None = None  # with --engine vllm: what the real vLLM did
