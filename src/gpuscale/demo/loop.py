"""The demo while it runs: every tick the demand pattern is applied and the pods follow the replicas; the
children and the controller are checked; once a second a row is recorded; the view shows it (the live view,
or the events and a plain line every few seconds when not on a terminal), until the duration is over or
``Stop`` (the SIGINT / SIGTERM handler) is set. ``run`` starts what it drives and stops it after.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..vllmcpu import MODEL_NAME
from .cluster import DemoCluster
from .controller import ControllerStatus, DemoController
from .errors import DemoError
from .output import Row
from .patterns import DemandPattern
from .processes import Child
from .realvllm import RealVllm
from .settings import DemoSettings
from .view import GpuLine, ViewInfo, plain_line, render

__all__ = ["Stop", "run_loop"]


class Stop:
    """The signal handler: ``event`` is set by SIGINT or SIGTERM, ``signal`` says which."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signal: int | None = None

    def __call__(self, sig: int) -> None:
        self.signal = sig
        self.event.set()


async def run_loop(
    settings: DemoSettings,
    cluster: DemoCluster,
    controller: DemoController,
    controller_task: asyncio.Task[None],
    children: list[Child],
    pattern: DemandPattern,
    clock: Callable[[], float],
    stop: Stop,
    rows: list[Row],
    info: ViewInfo,
    print_line: Callable[[str], None],
) -> None:
    """Every ``tick_s`` until ``duration`` or a stop signal: tick the cluster at the pattern's demand, check
    what runs, append a row to ``rows`` once a second, and show the tick."""
    live_cm: Any = contextlib.nullcontext()
    if settings.live:
        from rich.live import Live

        live_cm = Live(refresh_per_second=4, transient=False, redirect_stderr=False)
    next_row = 0.0
    plain = _Plain(settings.plain_every, print_line)
    last: Row | None = None
    with live_cm as live:
        while not stop.event.is_set():
            now = clock()
            if now >= settings.duration:
                break
            demand, phase = pattern.at(now)
            cluster.tick(now, demand)
            _check(children, cluster, controller_task)
            st = controller.status
            gpus = _gpu_lines(cluster, now)
            row = _row(settings.capacity_per_replica, cluster, st, now, demand, phase, gpus)
            if now >= next_row:
                rows.append(dataclasses.replace(row, t=round(next_row, 1)))
                next_row += 1.0
            if live is not None:
                live.update(render(info, row, rows or [row], gpus, st, cluster.real))
            else:
                plain.show(now, row, gpus, st, cluster.real)
            last = row
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.event.wait(), settings.tick_s)
    if last is not None and not settings.live:
        print_line(plain_line(last, _gpu_lines(cluster, clock())))


def _check(children: Sequence[Child], cluster: DemoCluster, controller_task: asyncio.Task[None]) -> None:
    """Raise what ended a child, the real vLLM or the controller."""
    for c in children:
        c.check()
    if cluster.real is not None:
        cluster.real.check()
    if controller_task.done():
        controller_task.result()  # raises what ended it
        raise DemoError("the controller stopped")


def _row(
    capacity_per_replica: float,
    cluster: DemoCluster,
    st: ControllerStatus,
    now: float,
    demand: float,
    phase: str,
    gpus: Sequence[GpuLine],
) -> Row:
    """The demo at ``now``: the demand and the capacity Ready, the replicas and pods, the scaler's answer
    as the controller saw it, the GPUs, the engines' queue, the gateway, the real vLLM."""
    ready = cluster.ready_count(now)
    return Row(
        t=now,
        phase=phase,
        demand=demand,
        capacity=ready * capacity_per_replica,
        desired=cluster.wanted,
        pods=len(cluster.pods),
        ready=ready,
        value=st.value,
        target=st.target,
        active=st.active,
        stream_active=st.stream_active,
        gpu_util=tuple(g.utilization for g in gpus),
        queue=cluster.queue(),
        decided=st.decided,
        decision=st.decision,
        held=cluster.held(),
        path_demand=st.path_demand,
        **_real_fields(cluster.real),
    )


class _Plain:
    """The output when not on a terminal: each new event as it comes, and a line every ``every`` seconds."""

    def __init__(self, every: float, print_line: Callable[[str], None]) -> None:
        self.every = every
        self.print_line = print_line
        self.next_line = 0.0
        self.events_shown = 0
        self.real_shown = 0

    def show(
        self, now: float, row: Row, gpus: Sequence[GpuLine], st: ControllerStatus, real: RealVllm | None
    ) -> None:
        for event in st.events[self.events_shown :]:
            self.print_line("  " + event)
        self.events_shown = len(st.events)
        if real is not None:
            for event in real.events[self.real_shown :]:
                self.print_line("  " + event)
            self.real_shown = len(real.events)
        if now >= self.next_line:
            self.print_line(plain_line(row, gpus))
            self.next_line += self.every


def _gpu_lines(cluster: DemoCluster, now: float) -> list[GpuLine]:
    real = cluster.real.pod if cluster.real is not None else None
    return [
        GpuLine(
            g.node,
            g.index,
            pod.name if pod else None,
            pod.phase(now) if pod else None,
            util,
            real=pod is not None and pod.name == real,
        )
        for g, (pod, util) in cluster.gpu_table(now).items()
    ]


def _real_fields(real: RealVllm | None) -> dict[str, Any]:
    """The row's readings of the real vLLM: its pod, the agents' newest reading of it, the requests open
    there, the server's count of finished requests."""
    if real is None:
        return {}
    fields: dict[str, Any] = {"vllm_pod": real.pod or ""}
    reading = real.agent_reading()
    if reading is not None:
        fields["vllm_waiting"], fields["vllm_running"] = reading.models[MODEL_NAME]
    if real.healthy:
        fields["vllm_outstanding"] = float(real.outstanding)
        if "success" in real.server_now:
            fields["vllm_success"] = real.server_now["success"]
    return fields
