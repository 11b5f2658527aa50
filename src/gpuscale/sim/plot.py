"""The PNGs a person reads at a glance: for a scenario, demand against each policy's Ready capacity, the
requests waiting (when the workload has a queue) and replicas; for a set of scenarios, each policy's unserved
share and GPU-hours per trace.

matplotlib (Agg backend) is imported here only, and this module only when a plot is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .compare import Row
    from .report import Result
    from .scenario import Scenario
    from .summary import Summary

__all__ = ["PALETTE", "Style", "plot_result", "plot_set", "result_figure", "set_figure", "styles"]

# Fourteen colours told apart at a glance: matplotlib's ten (tab10), then navy, gold, teal and maroon. Past
# them the colours come round again, drawn dashed (lines) and hatched (bars).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#000075",
    "#e6ab02",
    "#469990",
    "#800000",
)


@dataclass(frozen=True)
class Style:
    color: str
    again: bool  # a colour another policy has too: dashed, hatched


def styles(policies: Iterable[str]) -> dict[str, Style]:
    """Each policy's style, by its first place in ``policies``. A set of traces passes every policy of the
    set to each plot, so that a policy has the same colour in each trace's plot and in the set's."""
    order = list(dict.fromkeys(policies))
    return {p: Style(PALETTE[i % len(PALETTE)], i >= len(PALETTE)) for i, p in enumerate(order)}


def _axis(duration: int) -> tuple[float, str]:
    if duration > 3 * 3600:
        return 3600.0, "time (hours)"
    if duration > 600:
        return 60.0, "time (minutes)"
    return 1.0, "time (seconds)"


def _agg() -> None:
    import matplotlib

    matplotlib.use("Agg")


def plot_result(result: Result, path: Path, policies: Sequence[str] = ()) -> None:
    """``result_figure`` written to ``path``; ``policies``: those whose colours it shares (see ``styles``)."""
    _agg()
    import matplotlib.pyplot as plt

    fig = result_figure(result, styles([*policies, *(tl.policy for tl in result.timelines)]))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def result_figure(result: Result, style: Mapping[str, Style]) -> Figure:
    """Demand against each policy's Ready capacity (top), the requests waiting (when the workload has a
    queue) and the replicas (bottom); one legend, below the panels, with each policy's figures."""
    _agg()
    from matplotlib.patches import Patch

    sc = result.scenario
    scale, xlabel = _axis(sc.duration_seconds)
    step = max(1, sc.duration_seconds // 4000)
    seconds = range(0, sc.duration_seconds, step)
    times = [t / scale for t in seconds]
    queued = sc.workload.max_queue_seconds > 0
    fig, top, middle, bottom = _panels(queued, len(result.timelines))
    first = result.timelines[0]
    demand = [first.demand[t] for t in seconds]
    top.fill_between(times, demand, step="post", color="0.85", zorder=1)
    top.plot(times, demand, color="black", linewidth=1.2, drawstyle="steps-post", zorder=3)
    handles: list[object] = [Patch(facecolor="0.85", edgecolor="black", label="demand")]
    for tl, summary in zip(result.timelines, result.summaries, strict=True):
        st = style[tl.policy]
        if middle is not None:
            middle.plot(times, [tl.waiting[t] for t in seconds], **_line(st, 1.2), label=tl.policy)
        (line,) = top.plot(
            times,
            [tl.capacity[t] for t in seconds],
            **_line(st, 1.6),
            label=_figures(tl.policy, summary, queued),
            zorder=2,
        )
        handles.append(line)
        bottom.plot(times, [tl.desired[t] for t in seconds], **_line(st, 1.6), label=f"{tl.policy}: desired")
        bottom.plot(
            times,
            [tl.ready[t] for t in seconds],
            color=st.color,
            linewidth=1.0,
            linestyle=":",
            drawstyle="steps-post",
            label=f"{tl.policy}: ready",
        )
    _label_panels(sc, xlabel, top, middle, bottom)
    # below the panels, off the data: each policy's colour in every panel, and its figures
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return fig


def _panels(queued: bool, policies: int) -> tuple[Figure, Axes, Axes | None, Axes]:
    """The figure and its panels: capacity, the requests waiting (only when ``queued``), the replicas; tall
    enough for a legend of ``policies`` entries (and the demand's) in two columns below them."""
    import matplotlib.pyplot as plt

    rows = (policies + 2) // 2  # the legend's, in two columns
    legend_in = 0.25 + 0.17 * rows
    if queued:
        fig, (top, middle, bottom) = plt.subplots(
            3,
            1,
            figsize=(12, 9.5 + legend_in),
            sharex=True,
            height_ratios=(3, 1.6, 2),
            layout="constrained",
        )
        return fig, top, middle, bottom
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(12, 7.5 + legend_in), sharex=True, height_ratios=(3, 2), layout="constrained"
    )
    return fig, top, None, bottom


def _line(st: Style, width: float) -> dict[str, Any]:
    """A policy's step line: its colour, dashed where the colour comes round again."""
    return {
        "color": st.color,
        "linestyle": "--" if st.again else "-",
        "linewidth": width,
        "drawstyle": "steps-post",
    }


def _figures(policy: str, summary: Summary, queued: bool) -> str:
    """A policy's legend entry: its GPU-hours, demand unserved, wait (with a queue) and direction changes."""
    return (
        f"{policy}: {summary.gpu_hours:.1f} GPU-h, "
        f"{100 * summary.share_of_demand_unserved:.1f}% demand unserved, "
        + (f"p95 wait {summary.p95_queueing_delay:.0f} s, " if queued else "")
        + f"{summary.direction_changes} direction changes"
    )


def _label_panels(sc: Scenario, xlabel: str, top: Axes, middle: Axes | None, bottom: Axes) -> None:
    """Each panel's title, axis labels, limits and grid."""
    unit = sc.workload.demand_unit
    top.set_title(f"{sc.name}: demand vs. Ready capacity ({sc.workload.name})", loc="left", fontsize=12)
    top.set_ylabel(f"demand / capacity ({unit})")
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    if middle is not None:
        middle.set_title(
            f"requests waiting (abandoned after {sc.workload.max_queue_seconds} s: unserved)",
            loc="left",
            fontsize=10,
        )
        middle.set_ylabel("requests")
        middle.set_ylim(bottom=0)
        middle.grid(True, alpha=0.3)
    bottom.set_title("replicas (solid: desired, dotted: Ready)", loc="left", fontsize=10)
    bottom.set_ylabel("replicas")
    bottom.set_xlabel(xlabel)
    bottom.set_ylim(bottom=0)
    bottom.grid(True, alpha=0.3)


def plot_set(table: Sequence[Row], path: Path) -> None:
    """``set_figure`` written to ``path``."""
    _agg()
    import matplotlib.pyplot as plt

    fig = set_figure(table, styles(r.policy for r in table))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def set_figure(table: Sequence[Row], style: Mapping[str, Style]) -> Figure:
    """Grouped bars per trace: each policy's unserved share (top) and GPU-hours over the oracle's (bottom);
    the legend beside the panels."""
    _agg()
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r.trace for r in table))
    policies = list(dict.fromkeys(r.policy for r in table))
    by = {(r.trace, r.policy): r for r in table}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13.5, 7.5), sharex=True, layout="constrained")
    width = 0.8 / len(policies)
    for j, policy in enumerate(policies):
        xs = [i + (j - (len(policies) - 1) / 2) * width for i in range(len(traces))]
        unserved = [by[(t, policy)].unserved_percent if (t, policy) in by else 0.0 for t in traces]
        cost = []
        for t in traces:
            oracle = by.get((t, "oracle"))
            row = by.get((t, policy))
            cost.append(row.gpu_hours / oracle.gpu_hours if row and oracle and oracle.gpu_hours > 0 else 0.0)
        st = style[policy]
        hatch = "//" if st.again else None
        top.bar(xs, unserved, width, label=policy, color=st.color, hatch=hatch)
        bottom.bar(xs, cost, width, label=policy, color=st.color, hatch=hatch)
    top.set_title("share of demand unserved (not started within maxQueueSeconds)", loc="left", fontsize=11)
    top.set_ylabel("unserved %")
    top.grid(True, axis="y", alpha=0.3)
    bottom.set_title("GPU-hours, relative to the oracle's", loc="left", fontsize=11)
    bottom.set_ylabel("x oracle")
    bottom.axhline(1.0, color="black", linewidth=0.8)
    bottom.grid(True, axis="y", alpha=0.3)
    bottom.set_xticks(range(len(traces)), traces)
    handles, labels = top.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8, framealpha=0.9)  # beside the bars
    return fig
