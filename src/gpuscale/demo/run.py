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
from ..vllmcpu import MODEL_NAME, VLLM_CPU, Engine
from .cluster import NAMESPACE, SCALED_OBJECT, WORKLOAD, DemoCluster, request_path
from .controller import ControllerSettings, DemoController, ReplicaChange, hpa_behavior
from .errors import DemoError
from .gateway import GatewayStats
from .output import Row, plot_timeline, write_timeline
from .patterns import make_pattern
from .processes import Child, free_ports, start_child
from .realvllm import RealVllm, VllmSummary
from .view import GpuLine, ViewInfo, plain_line, render

__all__ = ["DemoResult", "DemoSettings", "Wake", "run_demo"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoSettings:
    out_dir: Path
    duration: float = 60.0
    pattern: str = "burst"
    profile: str = "online-inference"
    live: bool = False  # the rich view; else a line every ``plain_every`` seconds
    plain_every: float = 5.0
    nodes: tuple[str, ...] = ("node-a", "node-b", "node-c")
    gpus_per_node: int = 2
    capacity_per_replica: float = 10.0  # requests/s one Ready replica serves at 100 % GPU
    pending_s: float = 1.5
    loading_s: float = 2.5
    polling_interval: int = 5
    sync_period: int = 5
    cooldown_period: int = 10
    scale_down_window: int = 10
    window: str = "2"  # trigger metadata: seconds of samples per GPU (profiles use 10-120 s)
    agent_interval: str = "0.5"
    startup_timeout_s: float = 60.0
    tick_s: float = 0.25
    hold_timeout_s: float = 60.0  # how long the gateway holds a request for want of a Ready pod
    extra_metadata: dict[str, str] = field(default_factory=dict)
    vllm: Engine | None = None  # --engine vllm: the installed real vLLM, one pod's engine once healthy


@dataclass(frozen=True)
class Wake:
    """How the workload woke from zero behind the gateway, in the demo's seconds: its first request, KEDA's
    activation (0 → 1), the HPA's first scale-up after it (to what the scaler asked), the first Ready pod.
    ``None``: did not happen within the run."""

    first_request: float
    activated: ReplicaChange | None
    scaled: ReplicaChange | None
    first_ready: float | None


def wake_of(
    first_request: float | None, changes: Sequence[ReplicaChange], first_ready: float | None
) -> Wake | None:
    """The wake from the replica changes: the first 0 → N at or after the first request, and the HPA's first
    scale-up after it. ``None`` without a request."""
    if first_request is None:
        return None
    activated = next((c for c in changes if c.old == 0 and c.new > 0 and c.t >= first_request), None)
    scaled = None
    if activated is not None:
        scaled = next((c for c in changes if c.t >= activated.t and c.by == "HPA" and c.new > c.old), None)
    ready = first_ready if first_ready is not None and first_ready >= first_request else None
    return Wake(first_request, activated, scaled, ready)


@dataclass(frozen=True)
class DemoResult:
    timeline: Path
    plot: Path | None
    logs: Path
    rows: tuple[Row, ...]
    interrupted: bool
    # with engines: the agents' gpuscale_agent_engine_scrapes_total{result="ok"}, read before they stopped
    engine_scrapes_ok: int | None = None
    # how often each of the scaler's decisions shaped an answer ("ahead", "KV-cache guard", "N-1 guard", …)
    decisions: dict[str, int] = field(default_factory=dict)
    gateway: GatewayStats | None = None  # with an engine profile: what the stand-in gateway saw
    wake: Wake | None = None
    vllm: VllmSummary | None = None  # with --engine vllm: what the real vLLM did


class _Stop:
    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signal: int | None = None

    def __call__(self, sig: int) -> None:
        self.signal = sig
        self.event.set()


async def run_demo(settings: DemoSettings, print_line: Callable[[str], None] = print) -> DemoResult:
    said: list[VllmSummary] = []  # with --engine vllm: what the real vLLM did, once it is stopped
    result = await _run_demo(settings, print_line, said)
    return dataclasses.replace(result, vllm=said[0]) if said else result


async def _run_demo(
    settings: DemoSettings, print_line: Callable[[str], None], said: list[VllmSummary]
) -> DemoResult:
    loop = asyncio.get_running_loop()
    stop = _Stop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig)
    out = settings.out_dir
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpuscale-demo-"))  # short: unix socket paths
    pattern = make_pattern(settings.pattern, settings.duration, settings.capacity_per_replica)
    metric = settings.extra_metadata.get("metric") or ProfileSet.builtin()[settings.profile].metric
    engines = metric in ENGINE_METRICS  # the pods run mock vLLM engines the agents scrape
    if settings.vllm is not None and not engines:
        raise DemoError(f"--engine vllm needs an engine profile; {settings.profile} scales on {metric}")
    real = RealVllm.for_engine(settings.vllm, logs) if settings.vllm is not None else None
    # behind the stand-in gateway, read as the trigger's request path, the workload starts at zero
    gateway = engines
    min_replicas = 0 if pattern.idles or gateway else 1
    max_replicas = len(settings.nodes) * settings.gpus_per_node
    cluster = DemoCluster(
        workdir,
        settings.nodes,
        gpus_per_node=settings.gpus_per_node,
        capacity_per_replica=settings.capacity_per_replica,
        pending_s=settings.pending_s,
        loading_s=settings.loading_s,
        initial_replicas=0 if gateway else 1,
        engines=engines,
        gateway=gateway,
        hold_timeout_s=settings.hold_timeout_s,
        real=real,
    )
    children: list[Child] = []
    controller: DemoController | None = None
    controller_task: asyncio.Task[None] | None = None
    rows: list[Row] = []
    t0 = loop.time()
    scrapes_ok: list[int] = []

    def clock() -> float:
        return loop.time() - t0

    def check() -> None:
        for c in children:
            c.check()
        if real is not None:
            real.check()

    def demand_now() -> float:
        return pattern.at(max(0.0, clock()))[0]

    try:
        if real is not None:
            await real.start()
            print_line(
                f"vllm:     starting the real vLLM (vllm-cpu {VLLM_CPU}, a tiny model served as "
                f"{MODEL_NAME}, {real.max_num_seqs} sequences at once) on 127.0.0.1:{real.server.port}, "
                f"pid {real.pid}: about a minute on 2 cores, while the demo runs; "
                f"its log is {real.server.log}"
            )
        await cluster.start()
        ports = free_ports(2 * len(cluster.nodes) + 2)
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
        served = await _until_stopped(
            stop, asyncio.gather(*(c.grpc_port(settings.startup_timeout_s) for c in children)), check
        )
        if served is None:
            return _finish(settings, cluster, rows, logs, interrupted=True)
        agents = ",".join(f"127.0.0.1:{p}" for p in served)
        if real is not None:  # the agents' readings of its pod, as the scaler follows them
            real.readings.start(f"127.0.0.1:{p}" for p in served)
        scaler_args = [
            "--log-level", "info", "scaler", "--agents", agents,
            "--grpc-address", f"127.0.0.1:{ports[-2]}", "--metrics-address", f"127.0.0.1:{ports[-1]}",
            "--kubeconfig", str(cluster.kubeconfig),
            # the gateway's Service has no selector (the gateway is no pod): its EndpointSlice is by hand
            "--request-path-manual-endpoints",
        ]  # fmt: skip
        scaler = await start_child("scaler", scaler_args, logs / "scaler.log")
        children.append(scaler)
        scaler_port = await _until_stopped(stop, scaler.grpc_port(settings.startup_timeout_s), check)
        if scaler_port is None:
            return _finish(settings, cluster, rows, logs, interrupted=True)
        address = f"127.0.0.1:{scaler_port}"
        metadata = {
            "scalerAddress": address,
            "profile": settings.profile,
            "window": settings.window,
        }
        if gateway:  # the gateway's counts, as a request path; a replica serves capacity_per_replica req/s
            metadata |= {
                "requestPath": request_path(),
                "requestPathFormat": "envoy",
                "requestPathMatch": WORKLOAD,
                "replicaRate": f"{settings.capacity_per_replica:g}",
            }
        metadata |= settings.extra_metadata
        triggers: list[dict[str, Any]] = [{"type": "external-push", "metadata": metadata}]
        wake_target = None
        if pattern.idles and not gateway:
            wake_target = settings.capacity_per_replica
            triggers.append(
                {
                    "type": "prometheus",
                    "name": "requests",
                    "metadata": {"query": "sum(rate(gateway_requests_total[30s]))", "threshold": "10"},
                }
            )
        behavior = hpa_behavior(max_replicas, settings.scale_down_window, demand=engines)
        cluster.api.put_scaled_object(
            NAMESPACE,
            SCALED_OBJECT,
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": WORKLOAD},
            triggers,
            spec={
                "pollingInterval": settings.polling_interval,
                "cooldownPeriod": settings.cooldown_period,
                "minReplicaCount": min_replicas,
                "maxReplicaCount": max_replicas,
                "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            },
        )
        controller = DemoController(
            ControllerSettings(
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
                min_replicas=min_replicas,
                max_replicas=max_replicas,
                wake_target=wake_target,
                explain_url=f"http://127.0.0.1:{ports[-1]}/explain",
                behavior=behavior,
            ),
            clock,
            demand_now,
        )
        await controller.open()

        def warm_up() -> None:  # the agents need load on the GPUs before the scaler can report it
            cluster.tick(0.0, pattern.at(0.0)[0])
            check()

        warm_up()
        try:
            ok = await _until_stopped(
                stop,
                # an engine's queue is 0 under low demand: any answer means the engines are read
                controller.wait_for_metrics(
                    settings.startup_timeout_s, positive=pattern.at(0.0)[0] > 0 and not engines
                ),
                warm_up,
            )
        except TimeoutError as e:
            raise DemoError(f"{e}; the logs are in {logs}") from None
        if ok is None:
            return _finish(settings, cluster, rows, logs, interrupted=True)

        t0 = loop.time()  # the demo's time starts now
        controller_task = asyncio.ensure_future(controller.run())
        info = ViewInfo(
            pattern=settings.pattern,
            profile=settings.profile,
            duration=settings.duration,
            polling_interval=settings.polling_interval,
            sync_period=settings.sync_period,
            scale_down_window=settings.scale_down_window,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            capacity_per_replica=settings.capacity_per_replica,
            out_dir=str(out),
        )
        await _main_loop(
            settings,
            cluster,
            controller,
            controller_task,
            children,
            pattern,
            clock,
            stop,
            rows,
            info,
            print_line,
        )
        if engines:
            metrics_ports = [ports[2 * i + 1] for i in range(len(cluster.nodes))]
            scrapes_ok.append(await _engine_scrapes_ok(metrics_ports))
        result = _finish(settings, cluster, rows, logs, interrupted=stop.event.is_set())
        stats = cluster.gateway.stats() if cluster.gateway is not None else None
        return dataclasses.replace(
            result,
            engine_scrapes_ok=scrapes_ok[0] if scrapes_ok else None,
            decisions=dict(controller.status.decisions),
            gateway=stats,
            wake=wake_of(
                stats.first_arrival if stats is not None else None,
                controller.status.changes,
                cluster.first_ready_at,
            ),
        )
    finally:
        try:
            if controller_task is not None:
                controller_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await controller_task
            if controller is not None:
                await controller.close()
            for c in reversed(children):
                await c.stop()
        finally:
            if real is not None:  # after the agents, which scrape it; whatever failed before
                said.append(await real.close())
        await cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _until_stopped(stop: _Stop, work: Any, guard: Callable[[], None]) -> Any:
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


async def _main_loop(
    settings: DemoSettings,
    cluster: DemoCluster,
    controller: DemoController,
    controller_task: asyncio.Task[None],
    children: list[Child],
    pattern: Any,
    clock: Callable[[], float],
    stop: _Stop,
    rows: list[Row],
    info: ViewInfo,
    print_line: Callable[[str], None],
) -> None:
    live_cm: Any = contextlib.nullcontext()
    if settings.live:
        from rich.live import Live

        live_cm = Live(refresh_per_second=4, transient=False, redirect_stderr=False)
    next_row = 0.0
    next_line = 0.0
    events_shown = 0
    real_shown = 0
    last: Row | None = None
    with live_cm as live:
        while not stop.event.is_set():
            now = clock()
            if now >= settings.duration:
                break
            demand, phase = pattern.at(now)
            cluster.tick(now, demand)
            for c in children:
                c.check()
            if cluster.real is not None:
                cluster.real.check()
            if controller_task.done():
                controller_task.result()  # raises what ended it
                raise DemoError("the controller stopped")
            st = controller.status
            gpus = _gpu_lines(cluster, now)
            ready = cluster.ready_count(now)
            row = Row(
                t=now,
                phase=phase,
                demand=demand,
                capacity=ready * settings.capacity_per_replica,
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
                held=cluster.held(),
                path_demand=st.path_demand,
                **_real_fields(cluster.real),
            )
            if now >= next_row:
                rows.append(dataclasses.replace(row, t=round(next_row, 1)))
                next_row += 1.0
            if live is not None:
                live.update(render(info, row, rows or [row], gpus, st, cluster.real))
            else:
                for event in st.events[events_shown:]:
                    print_line("  " + event)
                events_shown = len(st.events)
                if cluster.real is not None:
                    for event in cluster.real.events[real_shown:]:
                        print_line("  " + event)
                    real_shown = len(cluster.real.events)
                if now >= next_line:
                    print_line(plain_line(row, gpus))
                    next_line += settings.plain_every
            last = row
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.event.wait(), settings.tick_s)
    if last is not None and not settings.live:
        print_line(plain_line(last, _gpu_lines(cluster, clock())))


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
