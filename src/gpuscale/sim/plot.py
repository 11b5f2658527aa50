"""The PNG a person reads at a glance: demand against each policy's Ready capacity, and replicas.

matplotlib (Agg backend) is imported here only, and this module only when a plot is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .report import Result

__all__ = ["plot_result"]


def _axis(duration: int) -> tuple[float, str]:
    if duration > 3 * 3600:
        return 3600.0, "time (hours)"
    if duration > 600:
        return 60.0, "time (minutes)"
    return 1.0, "time (seconds)"


def plot_result(result: Result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sc = result.scenario
    scale, xlabel = _axis(sc.duration_seconds)
    step = max(1, sc.duration_seconds // 4000)
    times = [t / scale for t in range(0, sc.duration_seconds, step)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7.5), sharex=True, height_ratios=(3, 2))
    first = result.timelines[0]
    top.fill_between(
        times,
        [first.demand[t] for t in range(0, sc.duration_seconds, step)],
        step="post",
        color="0.85",
        label="demand",
        zorder=1,
    )
    top.plot(
        times,
        [first.demand[t] for t in range(0, sc.duration_seconds, step)],
        color="black",
        linewidth=1.2,
        drawstyle="steps-post",
        zorder=3,
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (tl, summary) in enumerate(zip(result.timelines, result.summaries, strict=True)):
        color = colors[i % len(colors)]
        label = (
            f"{tl.policy}: {summary.gpu_hours:.1f} GPU-h, "
            f"{100 * summary.share_of_demand_unserved:.1f}% demand unserved, "
            f"{summary.direction_changes} direction changes"
        )
        top.plot(
            times,
            [tl.capacity[t] for t in range(0, sc.duration_seconds, step)],
            color=color,
            linewidth=1.6,
            drawstyle="steps-post",
            label=f"capacity, {label}",
            zorder=2,
        )
        bottom.plot(
            times,
            [tl.desired[t] for t in range(0, sc.duration_seconds, step)],
            color=color,
            linewidth=1.6,
            drawstyle="steps-post",
            label=f"{tl.policy}: desired",
        )
        bottom.plot(
            times,
            [tl.ready[t] for t in range(0, sc.duration_seconds, step)],
            color=color,
            linewidth=1.0,
            linestyle=":",
            drawstyle="steps-post",
            label=f"{tl.policy}: ready",
        )
    unit = sc.workload.demand_unit
    top.set_title(f"{sc.name}: demand vs. Ready capacity ({sc.workload.name})", loc="left", fontsize=12)
    top.set_ylabel(f"demand / capacity ({unit})")
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    top.legend(loc="upper left", fontsize=8, framealpha=0.9)
    bottom.set_title("replicas (solid: desired, dotted: Ready)", loc="left", fontsize=10)
    bottom.set_ylabel("replicas")
    bottom.set_xlabel(xlabel)
    bottom.set_ylim(bottom=0)
    bottom.grid(True, alpha=0.3)
    bottom.legend(loc="upper left", fontsize=8, ncol=2, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
