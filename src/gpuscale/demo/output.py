"""What the demo leaves behind: ``timeline.csv`` (one row a second) and ``demo.png``.

The PNG has the simulator's look (``gpuscale.sim.plot``): demand against Ready capacity on top, replicas at
the bottom (solid desired, dotted Ready, dashed the scaler's value over its target, shaded while IsActive),
and a heat map of every GPU's utilization in between; with the pods' engines, the requests waiting in
them on the top panel's right axis. matplotlib (Agg)
is imported only when the PNG is written.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Row", "plot_timeline", "write_timeline"]


@dataclass(frozen=True)
class Row:
    """The demo at one second. ``value`` is the scaler's last ``GetMetrics`` answer (NaN before any);
    ``gpu_util`` follows the GPU labels given to the writers; ``queue``: the requests waiting in the pods'
    engines (NaN when the pods run none)."""

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
                    *(f"{u:.1f}" for u in r.gpu_util),
                ]
            )


def plot_timeline(rows: Sequence[Row], gpu_labels: Sequence[str], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r.t for r in rows]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(12, 9), sharex=True, height_ratios=(3, 2, 2))
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
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    top.legend(loc="upper left", fontsize=8, framealpha=0.9)
    if any(not math.isnan(r.queue) for r in rows):
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
        waiting.set_ylabel("waiting requests", color="C3")
        waiting.set_ylim(bottom=0)
        waiting.legend(loc="upper right", fontsize=8, framealpha=0.9)

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
    proposal = [r.value / r.target if r.target > 0 and not math.isnan(r.value) else math.nan for r in rows]
    bottom.plot(
        t,
        proposal,
        color="0.4",
        linewidth=1.0,
        linestyle="--",
        drawstyle="steps-post",
        label="scaler value / target (HPA: ceil)",
    )
    active = [1.0 if r.active else 0.0 for r in rows]
    bottom.fill_between(
        t,
        0,
        active,
        step="post",
        color="C2",
        alpha=0.15,
        label="IsActive true",
        transform=bottom.get_xaxis_transform(),
    )
    bottom.set_title("replicas (solid: desired, dotted: Ready)", loc="left", fontsize=10)
    bottom.set_ylabel("replicas")
    bottom.set_xlabel("time (seconds)")
    bottom.set_ylim(bottom=0)
    bottom.grid(True, alpha=0.3)
    bottom.legend(loc="upper left", fontsize=8, ncol=4, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
