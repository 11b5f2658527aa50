"""Starting the demo's children in order: one ``gpuscale agent --backend mock`` per node, then ``gpuscale
scaler`` following them; each is waited for until it serves, while what already runs is checked, unless a
stop signal comes first (then the demo ends early, with what it has).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .cluster import DemoCluster
from .loop import Stop
from .processes import Child, start_child
from .settings import DemoSettings

__all__ = ["start_agents", "start_scaler", "until_stopped"]


async def start_agents(
    settings: DemoSettings,
    cluster: DemoCluster,
    ports: Sequence[int],
    logs: Path,
    children: list[Child],
    guard: Callable[[], None],
    stop: Stop,
) -> list[str] | None:
    """One ``gpuscale agent --backend mock`` per node, on ports ``2i`` (gRPC) and ``2i + 1`` (metrics);
    their gRPC addresses once they serve, None on a stop signal."""
    for i, node in enumerate(cluster.nodes):
        args = [
            "--log-level", "info", "agent", "--backend", "mock",
            "--mock-gpus", str(settings.gpus_per_node), "--mock-model", "h100",
            "--mock-demand-file", str(node.demand_file), "--node-name", node.name,
            "--interval", settings.agent_interval, "--history", "60", "--attribution-interval", "1",
            "--grpc-address", f"127.0.0.1:{ports[2 * i]}",
            "--metrics-address", f"127.0.0.1:{ports[2 * i + 1]}",
            "--kubelet-socket", str(node.kubelet.socket_path), "--kubeconfig", str(cluster.kubeconfig),
            "--proc-root", str(cluster.proc_root),
        ]  # fmt: skip
        children.append(await start_child(f"agent {node.name}", args, logs / f"agent-{node.name}.log"))
    served = await until_stopped(
        stop,
        asyncio.gather(*(c.grpc_port(settings.startup_timeout_s) for c in children)),
        guard,
    )
    return None if served is None else [f"127.0.0.1:{p}" for p in served]


async def start_scaler(
    settings: DemoSettings,
    cluster: DemoCluster,
    agents: Sequence[str],
    ports: Sequence[int],
    logs: Path,
    children: list[Child],
    guard: Callable[[], None],
    stop: Stop,
) -> int | None:
    """``gpuscale scaler`` following the agents, on the last two ports; its gRPC port once it serves, None
    on a stop signal."""
    scaler_args = [
        "--log-level", "info", "scaler", "--agents", ",".join(agents),
        "--grpc-address", f"127.0.0.1:{ports[-2]}", "--metrics-address", f"127.0.0.1:{ports[-1]}",
        "--kubeconfig", str(cluster.kubeconfig),
        # the gateway's Service has no selector (the gateway is no pod): its EndpointSlice is by hand
        "--request-path-manual-endpoints",
    ]  # fmt: skip
    scaler = await start_child("scaler", scaler_args, logs / "scaler.log")
    children.append(scaler)
    port: int | None = await until_stopped(stop, scaler.grpc_port(settings.startup_timeout_s), guard)
    return port


async def until_stopped(stop: Stop, work: Any, guard: Callable[[], None]) -> Any:
    """``await work``, calling ``guard`` (which raises when something died) every 0.2 s; None when a stop
    signal comes first."""
    task = asyncio.ensure_future(work)
    try:
        while not stop.event.is_set():
            done, _ = await asyncio.wait({task}, timeout=0.2)
            if done:
                return task.result()
            guard()
        return None
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
