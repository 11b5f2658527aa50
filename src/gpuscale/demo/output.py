"""What the demo leaves behind: ``timeline.csv`` (one row a second) and ``demo.png``.

The PNG has the simulator's look (``gpuscale.sim.plot``), four panels: demand against Ready capacity (with the
pods' engines, the requests waiting in them on its right axis, and those the gateway holds); a heat map of
every GPU's utilization; the scaler's answers over their target, shaded while IsActive, the answers a decision
shaped marked by its kind (``DECISION_MARKERS``: ahead, the KV-cache guard, …); the replicas on their own axis
(solid desired, dotted Ready). matplotlib (Agg) is imported only when the PNG is written, its font-cache
notice held back.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..scaling.decisions import Decision

__all__ = ["DECISION_MARKERS", "Row", "plot_timeline", "timeline_figure", "write_timeline"]


@dataclass(frozen=True)
class Row:
    """The demo at one second. ``value`` is the scaler's last ``GetMetrics`` answer (NaN before any);
    ``gpu_util`` follows the GPU labels given to the writers; ``queue``: the requests waiting in the pods'
    engines (NaN when the pods run none); ``held``: the requests the stand-in gateway holds for want of a
    Ready pod, and ``path_demand`` the request path's demand as the scaler read it (requests/s, its
    ``/explain``; NaN without a gateway, or before the scaler read it). With ``--engine vllm``: ``vllm_pod``,
    the pod whose engine is the real vLLM ("" before it has one); ``vllm_waiting`` and ``vllm_running``, the
    agents' newest reading of it (NaN before one); ``vllm_outstanding``, the requests the router sent it and
    has not had answered; ``vllm_success``, the server's own ``vllm:request_success_total``."""

    t: float
    phase: str
    demand: float
    capacity: float
    desired: int
    pods: int
    ready: int
    value: float
    target: float
    active: bool | None
    stream_active: bool | None
    gpu_util: tuple[float, ...]
    queue: float = math.nan
    decided: str = ""  # how the scaler decided its last answer ("ahead 4 s", "KV-cache guard"; "": plain)
    held: float = math.nan
    path_demand: float = math.nan
    vllm_pod: str = ""
    vllm_waiting: float = math.nan
    vllm_running: float = math.nan
    vllm_outstanding: float = math.nan
    vllm_success: float = math.nan
    decision: str = ""  # which decision that was (``Decision``'s words: "ahead", "request path"; "" none)

    @property
    def served(self) -> float:
        return min(self.demand, self.capacity)


def _flag(v: bool | None) -> str:
    return "" if v is None else str(v).lower()


def _num(v: float) -> str:
    return "" if math.isnan(v) else f"{v:.3f}"


def write_timeline(rows: Sequence[Row], gpu_labels: Sequence[str], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "t",
                "phase",
                "demand_rps",
                "capacity_rps",
                "served_rps",
                "replicas_desired",
                "pods",
                "replicas_ready",
                "scaler_value",
                "scaler_target",
                "active",
                "stream_active",
                "queue_waiting",
                "scaler_decided",
                "scaler_decision",
                "gateway_held",
                "path_demand_rps",
                "vllm_pod",
                "vllm_waiting",
                "vllm_running",
                "vllm_outstanding",
                "vllm_success_total",
                *(f"util_{label.replace('/', '_')}" for label in gpu_labels),
            ]
        )
        for r in rows:
            w.writerow(
                [
                    f"{r.t:.1f}",
                    r.phase,
                    f"{r.demand:.3f}",
                    f"{r.capacity:.3f}",
                    f"{r.served:.3f}",
                    r.desired,
                    r.pods,
                    r.ready,
                    _num(r.value),
                    _num(r.target),
                    _flag(r.active),
                    _flag(r.stream_active),
                    _num(r.queue),
                    r.decided,
                    r.decision,
                    _num(r.held),
                    _num(r.path_demand),
                    r.vllm_pod,
                    _num(r.vllm_waiting),
                    _num(r.vllm_running),
                    _num(r.vllm_outstanding),
                    _num(r.vllm_success),
                    *(f"{u:.1f}" for u in r.gpu_util),
                ]
            )


# Which decision shaped an answer (``Row.decision``, from the scaler's /explain): the marker the plot gives it
DECISION_MARKERS: dict[str, tuple[str, str, str]] = {
    Decision.AHEAD.value: ("^", "C1", "ahead: scaleAhead asked for the demand one cold start ahead"),
    Decision.KV_CACHE_GUARD.value: ("s", "C4", "KV-cache guard: the KV cache's floor held the replicas"),
    Decision.N_MINUS_1_GUARD.value: ("D", "C5", "N-1 guard"),
    Decision.ALL_PODS_LOADING.value: ("o", "C6", "all pods loading"),
    Decision.REQUEST_PATH.value: ("v", "C9", "request path: the gateway's demand over replicaRate"),
}
_FONT_CACHE_NOTICE = "Matplotlib is building the font cache"


def _quiet_font_cache(record: logging.LogRecord) -> bool:
    """matplotlib's notice while it builds its font cache (first use only): a progress note, not a problem
    of the demo's, which would tear the live view. Every other record of its font manager passes."""
    return not record.getMessage().startswith(_FONT_CACHE_NOTICE)


def _import_pyplot() -> Any:
    font_manager = logging.getLogger("matplotlib.font_manager")
    if _quiet_font_cache not in font_manager.filters:
        font_manager.addFilter(_quiet_font_cache)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_timeline(rows: Sequence[Row], gpu_labels: Sequence[str], title: str, path: Path) -> None:
    plt = _import_pyplot()
    fig = timeline_figure(rows, gpu_labels, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timeline_figure(rows: Sequence[Row], gpu_labels: Sequence[str], title: str) -> Any:
    """The demo's figure (a matplotlib ``Figure``): demand, the GPUs, the scaler's answers with how it decided
    them, the replicas."""
    plt = _import_pyplot()
    fig, (top, middle, scaler, bottom) = plt.subplots(
        4, 1, figsize=(12, 11), sharex=True, height_ratios=(3, 2, 2, 2)
    )
    _demand_panel(top, rows, title)
    _gpu_panel(fig, middle, rows, gpu_labels)
    _scaler_panel(scaler, rows)
    _replicas_panel(bottom, rows)
    fig.tight_layout()
    return fig


def _demand_panel(top: Any, rows: Sequence[Row], title: str) -> None:
    """Demand against Ready capacity, with the share unserved in the title; with engines, the requests
    waiting in them (and those the gateway holds) on a right axis."""
    t = [r.t for r in rows]
    demand = [r.demand for r in rows]
    top.fill_between(t, demand, step="post", color="0.85", label="demand", zorder=1)
    top.plot(t, demand, color="black", linewidth=1.2, drawstyle="steps-post", zorder=3)
    top.plot(
        t,
        [r.capacity for r in rows],
        color="C0",
        linewidth=1.6,
        drawstyle="steps-post",
        label="Ready capacity",
        zorder=2,
    )
    unserved = sum(max(0.0, r.demand - r.capacity) for r in rows)
    total = sum(demand) or 1.0
    top.set_title(
        f"{title}: demand vs. Ready capacity ({100 * unserved / total:.1f}% of demand unserved)",
        loc="left",
        fontsize=12,
    )
    top.set_ylabel("requests/s")
    top.set_ylim(0, 1.15 * max((max(r.demand, r.capacity) for r in rows), default=1.0) or 1.0)
    top.grid(True, alpha=0.3)
    top.legend(loc="upper left", fontsize=8, framealpha=0.9)
    if any(not math.isnan(r.queue) for r in rows):
        _waiting_axis(top, rows)


def _waiting_axis(top: Any, rows: Sequence[Row]) -> None:
    """The engines' waiting requests and the gateway's held ones, on the demand panel's right axis."""
    t = [r.t for r in rows]
    target_words = "" if math.isnan(rows[-1].target) else f"; target {rows[-1].target:g} per replica"
    waiting = top.twinx()
    waiting.plot(
        t,
        [r.queue for r in rows],
        color="C3",
        linewidth=1.3,
        drawstyle="steps-post",
        label=f"waiting requests (engines' vllm:num_requests_waiting{target_words})",
    )
    if any(not math.isnan(r.held) for r in rows):
        waiting.plot(
            t,
            [r.held for r in rows],
            color="C1",
            linewidth=1.3,
            linestyle="--",
            drawstyle="steps-post",
            label="held at the gateway, no pod Ready (envoy_cluster_upstream_rq_pending_active)",
        )
    waiting.set_ylabel("waiting requests", color="C3")
    waiting.set_ylim(bottom=0)
    waiting.legend(loc="upper right", fontsize=8, framealpha=0.9)


def _gpu_panel(fig: Any, middle: Any, rows: Sequence[Row], gpu_labels: Sequence[str]) -> None:
    """A heat map of every GPU's utilization, with its colour bar."""
    grid = [[r.gpu_util[i] for r in rows] for i in range(len(gpu_labels))]
    end = rows[-1].t + 1.0 if rows else 1.0
    image = middle.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        cmap="YlOrRd",
        vmin=0,
        vmax=100,
        extent=(rows[0].t if rows else 0.0, end, len(gpu_labels) - 0.5, -0.5),
    )
    middle.set_yticks(range(len(gpu_labels)), [f"GPU {label}" for label in gpu_labels], fontsize=8)
    target = rows[-1].target if rows else math.nan
    engines = any(not math.isnan(r.queue) for r in rows)  # the trigger is the engines' queue, not the GPUs
    middle.set_title(
        "GPU utilization (%) as the pods' processes drive it"
        + ("" if math.isnan(target) or engines else f"; target {target:g} per replica"),
        loc="left",
        fontsize=10,
    )
    bar = fig.colorbar(image, cax=middle.inset_axes((1.005, 0.0, 0.012, 1.0)))
    bar.ax.tick_params(labelsize=7)


def _scaler_panel(scaler: Any, rows: Sequence[Row]) -> None:
    """The scaler's answers over their target, shaded while IsActive, each decision marked by its kind."""
    t = [r.t for r in rows]
    proposal = [r.value / r.target if r.target > 0 and not math.isnan(r.value) else math.nan for r in rows]
    scaler.plot(
        t,
        proposal,
        color="0.3",
        linewidth=1.2,
        drawstyle="steps-post",
        label="scaler value / target (the HPA asks for its ceil)",
    )
    _decision_marks(scaler, rows, proposal)
    active = [1.0 if r.active else 0.0 for r in rows]
    scaler.fill_between(
        t,
        0,
        active,
        step="post",
        color="C2",
        alpha=0.15,
        label="IsActive true",
        transform=scaler.get_xaxis_transform(),
    )
    scaler.set_title(
        "the scaler's answers over the target; marked: how the scaler decided (its /explain)",
        loc="left",
        fontsize=10,
    )
    scaler.set_ylabel("value / target")
    finite = [p for p in proposal if not math.isnan(p)]
    scaler.set_ylim(0, 1.45 * max(finite, default=1.0) + 0.5)  # room above the peak for the legend
    scaler.grid(True, alpha=0.3)
    scaler.legend(loc="upper left", fontsize=8, ncol=2, framealpha=0.9)


def _decision_marks(scaler: Any, rows: Sequence[Row], proposal: Sequence[float]) -> None:
    """Each answer a decision shaped, at its value / target: the kinds of ``DECISION_MARKERS`` by their
    marker, every other decision as a cross of its own."""
    for kind, (marker, color, words) in DECISION_MARKERS.items():
        at = [(r.t, p) for r, p in zip(rows, proposal, strict=True) if r.decision == kind]
        if at:
            scaler.scatter(
                [x for x, _ in at],
                [0.0 if math.isnan(y) else y for _, y in at],
                marker=marker,
                color=color,
                s=28,
                zorder=3,
                label=words,
            )
    others = sorted({r.decision for r in rows if r.decision and r.decision not in DECISION_MARKERS})
    for decided in others:
        at = [(r.t, p) for r, p in zip(rows, proposal, strict=True) if r.decision == decided]
        scaler.scatter(
            [x for x, _ in at],
            [0.0 if math.isnan(y) else y for _, y in at],
            marker="x",
            s=28,
            zorder=3,
            label=decided,
        )


def _replicas_panel(bottom: Any, rows: Sequence[Row]) -> None:
    """The replicas on their own axis: desired solid, Ready dotted."""
    t = [r.t for r in rows]
    bottom.plot(
        t, [r.desired for r in rows], color="C0", linewidth=1.6, drawstyle="steps-post", label="desired"
    )
    bottom.plot(
        t,
        [r.ready for r in rows],
        color="C0",
        linewidth=1.0,
        linestyle=":",
        drawstyle="steps-post",
        label="Ready",
    )
    bottom.set_title("replicas (solid: desired, dotted: Ready)", loc="left", fontsize=10)
    bottom.set_ylabel("replicas")
    bottom.set_xlabel("time (seconds)")
    bottom.set_ylim(0, max((max(r.desired, r.ready) for r in rows), default=1) + 1)
    bottom.yaxis.get_major_locator().set_params(integer=True)
    bottom.grid(True, alpha=0.3)
    bottom.legend(loc="upper left", fontsize=8, ncol=2, framealpha=0.9)
