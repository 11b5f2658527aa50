"""The demo's live terminal view (rich), and the compact line it prints instead when not on a terminal."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..scaling.decisions import Decision
from .controller import ControllerStatus
from .output import Row
from .realvllm import RealVllm

__all__ = ["GpuLine", "ViewInfo", "plain_line", "render"]

_BLOCKS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class ViewInfo:
    pattern: str
    profile: str
    duration: float
    polling_interval: int
    sync_period: int
    scale_down_window: int
    min_replicas: int
    max_replicas: int
    capacity_per_replica: float
    out_dir: str


@dataclass(frozen=True)
class GpuLine:
    node: str
    index: int
    pod: str | None
    phase: str | None
    utilization: float
    real: bool = False  # its engine is the real vLLM (--engine vllm)


def _bar(pct: float, width: int = 20) -> Text:
    filled = round(width * max(0.0, min(100.0, pct)) / 100)
    color = "red" if pct >= 90 else "yellow" if pct >= 60 else "green"
    return Text("█" * filled, style=color) + Text("░" * (width - filled), style="grey35")


def sparkline(values: Sequence[float], top: float) -> str:
    if top <= 0:
        return _BLOCKS[0] * len(values)
    return "".join(_BLOCKS[min(7, max(0, int(7 * v / top + 0.5)))] for v in values)


def _flag(v: bool | None) -> Text:
    if v is None:
        return Text("—", style="grey50")
    return Text("active", style="bold green") if v else Text("inactive", style="yellow")


def real_words(row: Row, real: RealVllm) -> str:
    """The real vLLM in a few words: starting, or its pod with the agents' reading and its counts."""
    if real.state in ("new", "starting"):
        return f"starting (pid {real.pid}, {real.starting_for():.0f} s so far; about a minute on 2 cores)"
    if real.state == "failed":
        return f"did not start; its log is {real.server.log}"
    if real.state == "stopped":
        return "stopped"
    if not row.vllm_pod:
        return f"healthy on :{real.server.port}; it goes to the next pod Ready"
    read = (
        "no agent reading yet"
        if math.isnan(row.vllm_waiting)
        else f"the agent read waiting {row.vllm_waiting:.0f}, running {row.vllm_running:.0f}"
    )
    done = (
        ""
        if math.isnan(row.vllm_success)
        else f", {row.vllm_success:.0f} finished (vllm:request_success_total)"
    )
    return (
        f"{row.vllm_pod}'s engine, :{real.server.port}: {read}; {real.outstanding} open{done}; "
        f"sent {real.sent}, shed {real.shed}, failed {real.failed}"
    )


def render(
    info: ViewInfo,
    row: Row,
    history: Sequence[Row],
    gpus: Sequence[GpuLine],
    status: ControllerStatus,
    real: RealVllm | None = None,
) -> RenderableType:
    """The live view of one tick: a header, the GPUs by node, the scaler and replicas, the sparklines of
    demand and capacity, the latest events and a footer."""
    said = status.events[-4:] + (real.events[-2:] if real is not None else [])
    events = Text("\n".join(said) or "no scaling yet", style="grey70")
    footer = Text(
        f"KEDA polls every {info.polling_interval} s and the HPA syncs every {info.sync_period} s "
        f"(upstream 30 s / 15 s), scale-down window {info.scale_down_window} s (upstream 300 s): shortened "
        f"so a minute shows something.  Ctrl-C stops.  Output: {info.out_dir}",
        style="grey50",
    )
    return Panel(
        Group(
            _header(info, row),
            Text(""),
            _nodes(gpus),
            Text(""),
            _scaler(info, row, status, real),
            Text(""),
            _sparklines(info, row, history),
            Text(""),
            events,
            footer,
        )
    )


def _header(info: ViewInfo, row: Row) -> Text:
    return Text.assemble(
        ("gpuscale demo", "bold"),
        f"  t = {row.t:4.0f} / {info.duration:.0f} s   pattern ",
        (info.pattern, "bold"),
        "   phase ",
        (row.phase, "bold magenta"),
        f"   profile {info.profile}",
    )


def _nodes(gpus: Sequence[GpuLine]) -> Table:
    """A table per node, side by side: each GPU's utilization and its pod."""
    nodes = Table.grid(padding=(0, 2))
    names = list(dict.fromkeys(g.node for g in gpus))
    tables = []
    for name in names:
        t = Table(title=name, title_justify="left", show_edge=False, box=None, padding=(0, 1))
        t.add_column("GPU", justify="right")
        t.add_column("utilization")
        t.add_column("%", justify="right")
        t.add_column("pod")
        for g in (g for g in gpus if g.node == name):
            t.add_row(str(g.index), _bar(g.utilization, 14), f"{g.utilization:3.0f}", _pod_cell(g))
        tables.append(t)
    nodes.add_row(*tables)
    return nodes


def _pod_cell(g: GpuLine) -> Text:
    pod = Text("free", style="grey50") if g.pod is None else Text(f"{g.pod} ({g.phase})")
    if g.phase == "Pending":
        pod.stylize("yellow")
    elif g.phase == "Loading":
        pod.stylize("cyan")
    if g.real:
        pod.append(" real vLLM", style="bold magenta")
    return pod


def _scaler(info: ViewInfo, row: Row, status: ControllerStatus, real: RealVllm | None) -> Table:
    """The scaler's answer and how it decided, the replicas and the HPA's last sync, the real vLLM."""
    value = "—" if math.isnan(row.value) else f"{row.value:.1f}"
    ratio = (
        f"  → ceil(value / target) = {math.ceil(row.value / row.target - 1e-9)}"
        if row.target > 0 and not math.isnan(row.value)
        else ""
    )
    scaler = Table.grid(padding=(0, 2))
    scaler.add_row(
        Text(f"scaler: {status.metric_name or '—'}", style="bold"),
        Text(
            f"value {value}  target {row.target:g} per replica{ratio}"
            + ("" if math.isnan(row.queue) else f"   engines: {row.queue:.0f} waiting")
            + ("" if math.isnan(row.held) else f"   gateway: {row.held:.0f} held")
            + ("" if math.isnan(row.path_demand) else f", the request path {row.path_demand:.1f} req/s")
            + (f"   decided: {row.decided}" if row.decided else "")
        ),
        Text("IsActive ") + _flag(row.active),
        Text("StreamIsActive ") + _flag(row.stream_active),
    )
    scaler.add_row(
        Text("replicas", style="bold"),
        Text(
            f"desired {row.desired}  pods {row.pods}  Ready {row.ready}   "
            f"(min {info.min_replicas}, max {info.max_replicas})"
        ),
        Text(f"last HPA sync: {status.last_sync or '—'}"),
        Text(status.last_error[:60], style="red") if status.last_error else Text(""),
    )
    if real is not None:
        scaler.add_row(
            Text("real vLLM", style="bold magenta"),
            Text(real_words(row, real)),
            Text(real.last_error[:60], style="red") if real.last_error else Text(""),
            Text(""),
        )
    return scaler


def _sparklines(info: ViewInfo, row: Row, history: Sequence[Row]) -> Table:
    """Demand and Ready capacity over the last 48 rows, on one scale."""
    last = list(history)[-48:]
    top = max([r.demand for r in last] + [r.capacity for r in last] + [1.0])
    spark = Table.grid(padding=(0, 1))
    spark.add_row(
        Text("demand  ", style="bold"),
        Text(sparkline([r.demand for r in last], top)),
        Text(f"{row.demand:5.1f} req/s"),
    )
    spark.add_row(
        Text("capacity", style="bold"),
        Text(sparkline([r.capacity for r in last], top), style="cyan"),
        Text(f"{row.capacity:5.1f} req/s ({info.capacity_per_replica:g} per Ready replica at 100 %)"),
    )
    return spark


def plain_line(row: Row, gpus: Sequence[GpuLine]) -> str:
    value = "-" if math.isnan(row.value) else f"{row.value:.0f}"
    active = {None: "-", True: "active", False: "inactive"}[row.active]
    utils = " ".join(f"{g.node[-1]}{g.index}:{g.utilization:.0f}" for g in gpus)
    by_path = row.decision == Decision.REQUEST_PATH.value  # it says the path's demand itself
    return (
        f"t={row.t:4.0f}s {row.phase:<16} demand {row.demand:5.1f} capacity {row.capacity:5.1f} req/s | "
        f"replicas desired {row.desired} ready {row.ready} | scaler {value} (target {row.target:g}/replica) "
        f"{active} | "
        + ("" if math.isnan(row.queue) else f"waiting {row.queue:.0f} | ")
        + ("" if math.isnan(row.held) else f"held {row.held:.0f} | ")
        + ("" if math.isnan(row.path_demand) or by_path else f"path {row.path_demand:.1f} req/s | ")
        + (f"{row.decided} | " if row.decided else "")
        + (_real_segment(row) if row.vllm_pod else "")
        + f"util {utils}"
    )


def _real_segment(row: Row) -> str:
    read = (
        "-"
        if math.isnan(row.vllm_waiting)
        else f"waiting {row.vllm_waiting:.0f} running {row.vllm_running:.0f}"
    )
    done = "" if math.isnan(row.vllm_success) else f" finished {row.vllm_success:.0f}"
    return f"real vLLM {row.vllm_pod}: {read}{done} | "
