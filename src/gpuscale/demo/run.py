"""``run_demo``: the demo cluster, agents and scaler as processes, the controller, the view, the files.

Order of start: the local API and kubelets (and, with an engine profile, the stand-in gateway and its
Service); one ``gpuscale agent --backend mock`` per node (its demand file, kubelet socket, the API's
kubeconfig, a ``/proc`` with each pod's cgroup); ``gpuscale scaler`` following them; the ScaledObject pointing
at the scaler; the controller, once the scaler reports the workload. Then every tick the demand pattern is
applied and the pods follow the replicas; once a second a row is recorded. Everything stops in reverse order,
at the end, on Ctrl-C / SIGTERM, or when a child dies (an error).

With an engine profile the workload starts at zero replicas (``minReplicaCount: 0``) behind the gateway, and
the trigger reads the gateway as its request path (``requestPath``, ``requestPathFormat: envoy``,
``requestPathMatch``, ``replicaRate`` = a pod's capacity): the first requests wake it at the replicas their
demand needs. ``Wake`` says how that went.

With ``vllm`` (``--engine vllm``) the real vLLM starts first, in a thread, while the rest comes up and the
demo runs; once healthy it is one pod's engine (``realvllm``). It is stopped with the rest, after the agents
that scrape it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import signal
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import plotting
from ..scaling.keys import ENGINE_METRICS
from ..scaling.profiles import ProfileSet
from ..vllmcpu import MODEL_NAME, VLLM_CPU
from .cluster import NAMESPACE, SCALED_OBJECT, WORKLOAD, DemoCluster, request_path
from .controller import ControllerSettings, DemoController, hpa_behavior
from .errors import DemoError
from .loop import Stop, run_loop
from .output import Row, plot_timeline, write_timeline
from .patterns import DemandPattern, make_pattern
from .processes import Child, free_ports
from .realvllm import RealVllm, VllmSummary
from .settings import DemoResult, DemoSettings, wake_of
from .startup import start_agents, start_scaler, until_stopped
from .view import ViewInfo

__all__ = ["run_demo"]

log = logging.getLogger(__name__)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def run_demo(settings: DemoSettings, print_line: Callable[[str], None] = print) -> DemoResult:
    said: list[VllmSummary] = []  # with --engine vllm: what the real vLLM did, once it is stopped
    result = await _run_demo(settings, print_line, said)
    return dataclasses.replace(result, vllm=said[0]) if said else result


@dataclass(frozen=True)
class _Plan:
    """What the settings make of the run: the pattern; whether the pods run mock vLLM engines the agents
    scrape, behind the stand-in gateway read as the trigger's request path (then the workload starts at
    zero); the replicas' bounds; the real vLLM with ``--engine vllm``."""

    pattern: DemandPattern
    engines: bool
    gateway: bool
    min_replicas: int
    max_replicas: int
    real: RealVllm | None


@dataclass
class _Running:
    """What has been started, for the checks and the teardown: the children in order of start, the
    controller and its task, the real vLLM."""

    real: RealVllm | None
    children: list[Child] = field(default_factory=list)
    controller: DemoController | None = None
    controller_task: asyncio.Task[None] | None = None

    def check(self) -> None:
        """Raise what ended a child or the real vLLM."""
        for c in self.children:
            c.check()
        if self.real is not None:
            self.real.check()


class _Clock:
    """The demo's seconds, from its start; ``restart`` once the scaler reports the workload."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.t0 = loop.time()

    def __call__(self) -> float:
        return self._loop.time() - self.t0

    def restart(self) -> None:
        self.t0 = self._loop.time()


async def _run_demo(
    settings: DemoSettings, print_line: Callable[[str], None], said: list[VllmSummary]
) -> DemoResult:
    loop = asyncio.get_running_loop()
    stop = Stop()
    for sig in _SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    logs = settings.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpuscale-demo-"))  # short: unix socket paths
    plan = _plan(settings, logs)
    cluster = _cluster(settings, plan, workdir)
    running = _Running(plan.real)
    clock = _Clock(loop)
    try:
        return await _run(settings, plan, cluster, running, clock, stop, logs, print_line)
    finally:
        await _tear_down(running, said, cluster, workdir)
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)


def _plan(settings: DemoSettings, logs: Path) -> _Plan:
    pattern = make_pattern(settings.pattern, settings.duration, settings.capacity_per_replica)
    metric = settings.extra_metadata.get("metric") or ProfileSet.builtin()[settings.profile].metric
    engines = metric in ENGINE_METRICS  # the pods run mock vLLM engines the agents scrape
    if settings.vllm is not None and not engines:
        raise DemoError(f"--engine vllm needs an engine profile; {settings.profile} scales on {metric}")
    real = RealVllm.for_engine(settings.vllm, logs) if settings.vllm is not None else None
    # behind the stand-in gateway, read as the trigger's request path, the workload starts at zero
    gateway = engines
    return _Plan(
        pattern=pattern,
        engines=engines,
        gateway=gateway,
        min_replicas=0 if pattern.idles or gateway else 1,
        max_replicas=len(settings.nodes) * settings.gpus_per_node,
        real=real,
    )


def _cluster(settings: DemoSettings, plan: _Plan, workdir: Path) -> DemoCluster:
    return DemoCluster(
        workdir,
        settings.nodes,
        gpus_per_node=settings.gpus_per_node,
        capacity_per_replica=settings.capacity_per_replica,
        pending_s=settings.pending_s,
        loading_s=settings.loading_s,
        initial_replicas=0 if plan.gateway else 1,
        engines=plan.engines,
        gateway=plan.gateway,
        hold_timeout_s=settings.hold_timeout_s,
        real=plan.real,
    )


async def _run(
    settings: DemoSettings,
    plan: _Plan,
    cluster: DemoCluster,
    running: _Running,
    clock: _Clock,
    stop: Stop,
    logs: Path,
    print_line: Callable[[str], None],
) -> DemoResult:
    """Start everything in order, run the pattern, and say what happened; interrupted, with what there
    is, when a stop signal comes while the children start."""
    rows: list[Row] = []
    if plan.real is not None:
        await _start_real(plan.real, print_line)
    await cluster.start()
    ports = free_ports(2 * len(cluster.nodes) + 2)
    agents = await start_agents(settings, cluster, ports, logs, running.children, running.check, stop)
    if agents is None:
        return _finish(settings, cluster, rows, logs, interrupted=True)
    if plan.real is not None:  # the agents' readings of its pod, as the scaler follows them
        plan.real.readings.start(agents)
    scaler_port = await start_scaler(
        settings, cluster, agents, ports, logs, running.children, running.check, stop
    )
    if scaler_port is None:
        return _finish(settings, cluster, rows, logs, interrupted=True)
    address = f"127.0.0.1:{scaler_port}"
    metadata = _trigger_metadata(settings, plan, address)
    behavior = hpa_behavior(plan.max_replicas, settings.scale_down_window, demand=plan.engines)
    wake_target = _put_scaled_object(settings, plan, cluster, metadata, behavior)
    controller = DemoController(
        _controller_settings(settings, plan, cluster, address, metadata, wake_target, ports, behavior),
        clock,
        lambda: plan.pattern.at(max(0.0, clock()))[0],
    )
    running.controller = controller
    await controller.open()
    if not await _warm_up(settings, plan, cluster, controller, running, stop, logs):
        return _finish(settings, cluster, rows, logs, interrupted=True)
    clock.restart()  # the demo's time starts now
    running.controller_task = asyncio.ensure_future(controller.run())
    await run_loop(
        settings,
        cluster,
        controller,
        running.controller_task,
        running.children,
        plan.pattern,
        clock,
        stop,
        rows,
        _view_info(settings, plan),
        print_line,
    )
    return await _result(settings, plan, cluster, controller, rows, logs, ports, stop)


async def _start_real(real: RealVllm, print_line: Callable[[str], None]) -> None:
    await real.start()
    print_line(
        f"vllm:     starting the real vLLM (vllm-cpu {VLLM_CPU}, a tiny model served as "
        f"{MODEL_NAME}, {real.max_num_seqs} sequences at once) on 127.0.0.1:{real.server.port}, "
        f"pid {real.pid}: about a minute on 2 cores, while the demo runs; "
        f"its log is {real.server.log}"
    )


def _trigger_metadata(settings: DemoSettings, plan: _Plan, address: str) -> dict[str, str]:
    """The external-push trigger's metadata: the scaler, the profile and window; behind the gateway its
    counts as the request path; then the settings' own."""
    metadata = {
        "scalerAddress": address,
        "profile": settings.profile,
        "window": settings.window,
    }
    if plan.gateway:  # the gateway's counts, as a request path; a replica serves capacity_per_replica req/s
        metadata |= {
            "requestPath": request_path(),
            "requestPathFormat": "envoy",
            "requestPathMatch": WORKLOAD,
            "replicaRate": f"{settings.capacity_per_replica:g}",
        }
    metadata |= settings.extra_metadata
    return metadata


def _put_scaled_object(
    settings: DemoSettings,
    plan: _Plan,
    cluster: DemoCluster,
    metadata: dict[str, str],
    behavior: dict[str, Any],
) -> float | None:
    """The ScaledObject on the scaler, and where a pattern idles without the gateway, a request-rate
    trigger that wakes the workload; return that trigger's target (None without one)."""
    triggers: list[dict[str, Any]] = [{"type": "external-push", "metadata": metadata}]
    wake_target = None
    if plan.pattern.idles and not plan.gateway:
        wake_target = settings.capacity_per_replica
        triggers.append(
            {
                "type": "prometheus",
                "name": "requests",
                "metadata": {"query": "sum(rate(gateway_requests_total[30s]))", "threshold": "10"},
            }
        )
    cluster.api.put_scaled_object(
        NAMESPACE,
        SCALED_OBJECT,
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": WORKLOAD},
        triggers,
        spec={
            "pollingInterval": settings.polling_interval,
            "cooldownPeriod": settings.cooldown_period,
            "minReplicaCount": plan.min_replicas,
            "maxReplicaCount": plan.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
        },
    )
    return wake_target


def _controller_settings(
    settings: DemoSettings,
    plan: _Plan,
    cluster: DemoCluster,
    address: str,
    metadata: dict[str, str],
    wake_target: float | None,
    ports: Sequence[int],
    behavior: dict[str, Any],
) -> ControllerSettings:
    return ControllerSettings(
        scaler_address=address,
        api_url=cluster.api.url,
        token=cluster.token,
        namespace=NAMESPACE,
        scaled_object=SCALED_OBJECT,
        workload=WORKLOAD,
        metadata=metadata,
        polling_interval=settings.polling_interval,
        sync_period=settings.sync_period,
        cooldown_period=settings.cooldown_period,
        scale_down_window=settings.scale_down_window,
        min_replicas=plan.min_replicas,
        max_replicas=plan.max_replicas,
        wake_target=wake_target,
        explain_url=f"http://127.0.0.1:{ports[-1]}/explain",
        behavior=behavior,
    )


async def _warm_up(
    settings: DemoSettings,
    plan: _Plan,
    cluster: DemoCluster,
    controller: DemoController,
    running: _Running,
    stop: Stop,
    logs: Path,
) -> bool:
    """Load the GPUs at the pattern's start until the scaler reports the workload: the agents need load on
    the GPUs before the scaler can report it. False on a stop signal; ``DemoError`` when it does not in
    time."""

    def warm_up() -> None:
        cluster.tick(0.0, plan.pattern.at(0.0)[0])
        running.check()

    warm_up()
    try:
        ok = await until_stopped(
            stop,
            # an engine's queue is 0 under low demand: any answer means the engines are read
            controller.wait_for_metrics(
                settings.startup_timeout_s, positive=plan.pattern.at(0.0)[0] > 0 and not plan.engines
            ),
            warm_up,
        )
    except TimeoutError as e:
        raise DemoError(f"{e}; the logs are in {logs}") from None
    return ok is not None


def _view_info(settings: DemoSettings, plan: _Plan) -> ViewInfo:
    return ViewInfo(
        pattern=settings.pattern,
        profile=settings.profile,
        duration=settings.duration,
        polling_interval=settings.polling_interval,
        sync_period=settings.sync_period,
        scale_down_window=settings.scale_down_window,
        min_replicas=plan.min_replicas,
        max_replicas=plan.max_replicas,
        capacity_per_replica=settings.capacity_per_replica,
        out_dir=str(settings.out_dir),
    )


async def _result(
    settings: DemoSettings,
    plan: _Plan,
    cluster: DemoCluster,
    controller: DemoController,
    rows: list[Row],
    logs: Path,
    ports: Sequence[int],
    stop: Stop,
) -> DemoResult:
    """The files and what the run did: with engines the agents' scrapes (read before they stop), the
    scaler's decisions, the gateway's counts and how the workload woke."""
    scrapes_ok = None
    if plan.engines:
        scrapes_ok = await _engine_scrapes_ok([ports[2 * i + 1] for i in range(len(cluster.nodes))])
    result = _finish(settings, cluster, rows, logs, interrupted=stop.event.is_set())
    stats = cluster.gateway.stats() if cluster.gateway is not None else None
    return dataclasses.replace(
        result,
        engine_scrapes_ok=scrapes_ok,
        decisions=dict(controller.status.decisions),
        gateway=stats,
        wake=wake_of(
            stats.first_arrival if stats is not None else None,
            controller.status.changes,
            cluster.first_ready_at,
        ),
    )


async def _tear_down(running: _Running, said: list[VllmSummary], cluster: DemoCluster, workdir: Path) -> None:
    """Stop in reverse order: the controller, the children, the real vLLM (after the agents, which scrape
    it, whatever failed before, its summary to ``said``), the cluster; remove the work directory."""
    try:
        if running.controller_task is not None:
            running.controller_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running.controller_task
        if running.controller is not None:
            await running.controller.close()
        for c in reversed(running.children):
            await c.stop()
    finally:
        if running.real is not None:
            said.append(await running.real.close())
    await cluster.stop()
    shutil.rmtree(workdir, ignore_errors=True)


async def _engine_scrapes_ok(ports: list[int]) -> int:
    """The agents' ``gpuscale_agent_engine_scrapes_total{result="ok"}``, summed, from their ``/metrics``."""
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for port in ports:
            try:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    text = await response.text()
            except (aiohttp.ClientError, TimeoutError) as e:
                log.warning("could not read the agent's metrics on port %d: %s", port, e)
                continue
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if (
                        sample.name == "gpuscale_agent_engine_scrapes_total"
                        and sample.labels.get("result") == "ok"
                    ):
                        total += sample.value
    return int(total)


def _finish(
    settings: DemoSettings, cluster: DemoCluster, rows: list[Row], logs: Path, *, interrupted: bool
) -> DemoResult:
    out = settings.out_dir
    labels = [g.label for g in cluster.gpus]
    timeline = out / "timeline.csv"
    write_timeline(rows, labels, timeline)
    plot: Path | None = None
    if rows and plotting.available():
        plot = out / "demo.png"
        title = f"gpuscale demo, pattern {settings.pattern}, profile {settings.profile}"
        plot_timeline(rows, labels, title, plot)
    return DemoResult(timeline, plot, logs, tuple(rows), interrupted)
