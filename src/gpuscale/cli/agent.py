"""``gpuscale agent``: the node agent (a DaemonSet on every GPU node)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

import grpc.aio

from .. import lifecycle
from ..agent.service import Agent, DraDeviceSource, NodeLabelSource, PodSource
from ..agent.settings import AgentSettings
from ..backends.base import Backend
from ._options import (
    add_backend_arguments,
    add_server_arguments,
    add_server_tls_arguments,
    backend_from_args,
    check_server_arguments,
    env,
    env_flag,
    kubeconfig_errors,
    kubeconfig_from_args,
    positive_seconds,
    server_tls_from_args,
)

__all__ = ["register"]

log = logging.getLogger(__name__)

# --interval: not a busy loop (a sample is a few NVML calls a GPU), and at least a sample a minute (readiness
# waits three intervals for one; a trigger's staleAfter is tens of seconds).
INTERVAL_S = (0.1, 60.0)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "agent",
        help="run the node agent: sample GPUs, serve /metrics and the Watch stream",
        description="Run the node agent: sample every GPU, attribute GPUs to pods, serve Prometheus /metrics "
        "and the gpuscale.v1.Agent/Watch stream. Every flag also reads GPUSCALE_<FLAG> "
        "(--kubeconfig: GPUSCALE_KUBECONFIG_PATH).",
    )
    add_backend_arguments(p)
    p.add_argument(
        "--node-name",
        default=env("NODE_NAME") or os.environ.get("NODE_NAME") or socket.gethostname(),
        help="this node's name (default: $NODE_NAME, else the host name)",
    )
    p.add_argument(
        "--interval",
        default=env("INTERVAL", "1"),
        help=f"seconds between samples, {INTERVAL_S[0]:g} to {INTERVAL_S[1]:g} (default 1)",
    )
    add_server_arguments(
        p,
        grpc_port=6000,
        metrics_port=9400,
        grpc_serves="Watch",
        event_loop="asyncio",
        event_loop_why="a sample a second gains nothing from uvloop, which adds 2 MiB on every node",
    )
    p.add_argument(
        "--kubelet-socket",
        default=env("KUBELET_SOCKET", "/var/lib/kubelet/pod-resources/kubelet.sock"),
        help="the kubelet PodResources socket; attribution is off while it does not exist",
    )
    p.add_argument(
        "--hostname-label",
        default=env("HOSTNAME_LABEL", "Hostname"),
        choices=["Hostname", "hostname"],
        help="the node label's name on GPU series: Hostname (dcgm-exporter ≤ 4.5) or hostname (newer)",
    )
    p.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG_PATH"),
        help="kubeconfig for the Kubernetes API (pod labels); default: in-cluster config in a pod, else off",
    )
    p.add_argument(
        "--history", default=env("HISTORY", "300"), help="seconds of samples kept per GPU (default 300)"
    )
    p.add_argument("--proc-root", default=env("PROC_ROOT", "/proc"), help=argparse.SUPPRESS)
    p.add_argument(
        "--attribution-interval",
        default=env("ATTRIBUTION_INTERVAL", "5"),
        help="seconds between asks of the kubelet who holds which GPU (default 5; the kubelet allows 100/s)",
    )
    p.add_argument(
        "--extra-resource-names",
        default=env("EXTRA_RESOURCE_NAMES", ""),
        help="more device-plugin resource names or DRA driver names to attribute, comma-separated "
        "(e.g. nvidia.com/gpu.shared)",
    )
    p.add_argument(
        "--serve-external-scaler",
        action="store_true",
        default=None,
        help="also answer KEDA's externalscaler calls for this node's GPUs (trigger scope: node) on the "
        "gRPC port (GPUSCALE_SERVE_EXTERNAL_SCALER: true/false, 1/0, yes/no, on/off)",
    )
    add_server_tls_arguments(p, "TLS (between the scaler, or KEDA, and the agent)", "clients (the scaler)")
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    check_server_arguments(args)
    kubeconfig = kubeconfig_from_args(args)
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and kubeconfig is None
    return AgentSettings(
        node_name=args.node_name,
        interval=positive_seconds(args.interval, "--interval", within=INTERVAL_S),
        grpc_address=args.grpc_address,
        metrics_address=args.metrics_address,
        kubelet_socket=Path(args.kubelet_socket),
        hostname_label=args.hostname_label,
        kubeconfig=kubeconfig,
        in_cluster=in_cluster,
        history_seconds=positive_seconds(args.history, "--history"),
        attribution_interval=positive_seconds(args.attribution_interval, "--attribution-interval"),
        proc_root=Path(args.proc_root),
        extra_resource_names=tuple(n.strip() for n in args.extra_resource_names.split(",") if n.strip()),
        serve_external_scaler=env_flag("SERVE_EXTERNAL_SCALER", args.serve_external_scaler),
        tls=server_tls_from_args(args),
    )


async def kube_sources(
    settings: AgentSettings,
) -> tuple[PodSource | None, NodeLabelSource | None, DraDeviceSource | None]:
    """The Kubernetes API watchers of this node's pods, of its Node and of its ResourceSlices (DRA), sharing
    one client, when running in a cluster or given a kubeconfig; else none."""
    if not settings.in_cluster and settings.kubeconfig is None:
        log.info("not in a cluster and no --kubeconfig: pod labels, node labels and DRA devices are off")
        return None, None, None
    from ..kube.nodes import NodeLabelWatcher
    from ..kube.pods import NodePodWatcher, api_client_from
    from ..kube.resourceslices import NodeResourceSliceWatcher

    with kubeconfig_errors(settings.kubeconfig):
        api = await api_client_from(settings.kubeconfig, settings.in_cluster)
    node = settings.node_name
    pods = NodePodWatcher(api, node, extra_resource_names=settings.extra_resource_names)
    return pods, NodeLabelWatcher(api, node), NodeResourceSliceWatcher(api, node)


async def serve(settings: AgentSettings, backend: Backend) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # first: a signal during start-up stops it
        loop.add_signal_handler(sig, stop.set)
    started: list[Agent] = []

    async def start() -> None:
        pods, node, dra = await kube_sources(settings)  # a kubeconfig's credential plugin can take long
        agent = Agent(settings, backend, pods=pods, node=node, dra=dra)
        started.append(agent)
        if settings.serve_external_scaler:
            from ..scaler.local import add_node_scope

            def add_scaler(server: grpc.aio.Server) -> None:
                add_node_scope(server, agent.state, registry=agent.registry)

            agent.extra_services.append(add_scaler)
        await agent.start()  # a failed start (an address in use) still stops what it had started

    before = _children()
    try:
        if not await lifecycle.unless_stopped(start(), stop):
            log.info("stopping: signalled during start-up")
            _kill_new_children(before)
            return
        (agent,) = started
        log.info(
            "agent %s serving gRPC on :%d and metrics on :%d",
            agent.settings.node_name,
            agent.grpc_port,
            agent.metrics_port,
        )
        await stop.wait()
    finally:
        for agent in started:
            await agent.stop()
            api = getattr(agent.pods, "api", None)
            if api is not None:
                await api.close()


def _children() -> set[int]:
    """This process's children, as Linux lists them (``/proc/self/task/*/children``); none elsewhere."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(p) for p in task.read_text().split())
    return pids


def _kill_new_children(before: set[int]) -> None:
    """Kill the processes a cancelled start-up left running: the agent starts none itself, but a kubeconfig's
    credential plugin (``users[].user.exec``) is one, and the client does not stop it when cancelled (asyncio
    kills a subprocess only when its transport is closed). Left, it would outlive the agent."""
    for pid in sorted(_children() - before):
        log.info("stopping process %d that start-up left running (a kubeconfig credential plugin)", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run(args: argparse.Namespace) -> int:
    import prometheus_client

    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series only add noise to GPU dashboards
    settings = settings_from_args(args)
    backend = backend_from_args(args, node=settings.node_name, open_it=False)
    lifecycle.run(serve(settings, backend), args.event_loop)
    return 0
