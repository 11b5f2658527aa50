"""The PNGs a person reads at a glance: for a scenario, demand against each policy's Ready capacity, the
requests waiting (when the workload has a queue) and replicas; for a set of scenarios, each policy's unserved
share and GPU-hours per trace.

matplotlib (Agg backend) is imported here only, and this module only when a plot is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .compare import Row
    from .report import Result

__all__ = ["plot_result", "plot_set"]


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
    queued = sc.workload.max_queue_seconds > 0
    if queued:
        fig, (top, middle, bottom) = plt.subplots(
            3, 1, figsize=(12, 9.5), sharex=True, height_ratios=(3, 1.6, 2)
        )
    else:
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
            + (f"p95 wait {summary.p95_queueing_delay:.0f} s, " if queued else "")
            + f"{summary.direction_changes} direction changes"
        )
        if queued:
            middle.plot(
                times,
                [tl.waiting[t] for t in range(0, sc.duration_seconds, step)],
                color=color,
                linewidth=1.2,
                drawstyle="steps-post",
                label=tl.policy,
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
    if queued:
        middle.set_title(
            f"requests waiting (abandoned after {sc.workload.max_queue_seconds} s: unserved)",
            loc="left",
            fontsize=10,
        )
        middle.set_ylabel("requests")
        middle.set_ylim(bottom=0)
        middle.grid(True, alpha=0.3)
        middle.legend(loc="upper right", fontsize=8, framealpha=0.9)
    bottom.set_title("replicas (solid: desired, dotted: Ready)", loc="left", fontsize=10)
    bottom.set_ylabel("replicas")
    bottom.set_xlabel(xlabel)
    bottom.set_ylim(bottom=0)
    bottom.grid(True, alpha=0.3)
    bottom.legend(loc="upper left", fontsize=8, ncol=2, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_set(table: Sequence[Row], path: Path) -> None:
    """Grouped bars per trace: each policy's unserved share (top) and GPU-hours over the oracle's (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r.trace for r in table))
    policies = list(dict.fromkeys(r.policy for r in table))
    by = {(r.trace, r.policy): r for r in table}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13.5, 7.5), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(policies)
    for j, policy in enumerate(policies):
        xs = [i + (j - (len(policies) - 1) / 2) * width for i in range(len(traces))]
        unserved = [by[(t, policy)].unserved_percent if (t, policy) in by else 0.0 for t in traces]
        cost = []
        for t in traces:
            oracle = by.get((t, "oracle"))
            row = by.get((t, policy))
            cost.append(row.gpu_hours / oracle.gpu_hours if row and oracle and oracle.gpu_hours > 0 else 0.0)
        color = colors[j % len(colors)]
        top.bar(xs, unserved, width, label=policy, color=color)
        bottom.bar(xs, cost, width, label=policy, color=color)
    top.set_title("share of demand unserved (not started within maxQueueSeconds)", loc="left", fontsize=11)
    top.set_ylabel("unserved %")
    top.grid(True, axis="y", alpha=0.3)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9)  # beside the bars
    bottom.set_title("GPU-hours, relative to the oracle's", loc="left", fontsize=11)
    bottom.set_ylabel("x oracle")
    bottom.axhline(1.0, color="black", linewidth=0.8)
    bottom.grid(True, axis="y", alpha=0.3)
    bottom.set_xticks(range(len(traces)), traces)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
