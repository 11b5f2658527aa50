"""``gpuscale demo --engine vllm`` without a real vLLM: the flag's checks, and the real vLLM's place in the demo
(the pod it goes to, the completions the router sends it, its load, its cap, its stop) against a stand-in
server that answers completions and ``/metrics`` as vLLM does. The real vLLM itself: tests/engine."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gpuscale.demo.cluster import NAMESPACE, DemoCluster
from gpuscale.demo.controller import ControllerStatus
from gpuscale.demo.engines import ANNOTATION, DemoEngines
from gpuscale.demo.errors import DemoError
from gpuscale.demo.output import Row
from gpuscale.demo.realvllm import RealVllm, server_readings
from gpuscale.demo.view import GpuLine, ViewInfo, plain_line, render
from gpuscale.vllmcpu import MODEL_NAME, EngineFailed
from tests.poll import until


def demo(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscale", "demo", "--duration", "20", "--out", str(tmp_path / "out"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
    )


def test_an_engine_other_than_mock_or_vllm_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = demo(tmp_path, "--engine", "foo")
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.splitlines() == ['gpuscale: error: --engine "foo" must be one of mock, vllm']
    assert run.stdout == ""


def test_engine_vllm_without_the_install_is_one_line_naming_the_flag_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "cache"
    empty.mkdir()
    run = demo(tmp_path, "--profile", "llm-serving", "--engine", "vllm", env={"XDG_CACHE_HOME": str(empty)})
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("gpuscale: error: --engine vllm: the real vLLM is not installed (looked in "), line
    assert f"{empty}/gpuscale/vllm-cpu-" in line and "run scripts/vllm-cpu build first" in line, line
    assert run.stdout == ""  # refused before anything starts
    assert not (tmp_path / "out" / "logs" / "vllm.log").exists()


def test_engine_vllm_with_a_gpu_profile_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = demo(tmp_path, "--profile", "online-inference", "--engine", "vllm")
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("gpuscale: error: --engine vllm puts the real vLLM behind one of the pods"), line
    assert '--profile "online-inference" scales on gpu_utilization' in line, line


def test_the_servers_own_waiting_running_and_finished_requests_from_its_exposition() -> None:
    text = (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 3.0\n'
        'vllm:num_requests_running{engine="0",model_name="tiny"} 4.0\n'
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 17.0\n'
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 2.0\n'
        'vllm:request_success_created{engine="0",finished_reason="stop",model_name="tiny"} 1.7e9\n'
    )
    assert server_readings(text) == {"waiting": 3.0, "running": 4.0, "success": 19.0}
    assert server_readings("") == {}


@dataclass
class StandIn:
    """A server that answers as vLLM does: ``/v1/completions`` after ``delay_s``, ``/metrics`` with its
    counts. ``launch`` returns after ``start_s``; ``stop`` marks it stopped."""

    port: int
    log: Path
    delay_s: float = 0.2
    start_s: float = 0.1
    process: Any = None
    bodies: list[dict[str, Any]] = field(default_factory=list)
    running: int = 0
    done: int = 0
    stopped: int = 0
    killed: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def launch(self, timeout: float = 300.0) -> None:
        import time

        time.sleep(self.start_s)

    def stop(self, grace: float = 20.0) -> None:
        self.stopped += 1

    def kill(self) -> None:
        self.killed += 1


@pytest.fixture
async def stand_in(tmp_path: Path) -> AsyncIterator[StandIn]:
    server = StandIn(0, tmp_path / "vllm.log")

    async def complete(request: web.Request) -> web.Response:
        server.bodies.append(await request.json())
        server.running += 1
        try:
            await asyncio.sleep(server.delay_s)
        finally:
            server.running -= 1
        server.done += 1
        return web.json_response({"choices": [{"text": "x", "finish_reason": "length"}]})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            text=f'vllm:num_requests_waiting{{model_name="tiny"}} 0.0\n'
            f'vllm:num_requests_running{{model_name="tiny"}} {server.running}.0\n'
            f'vllm:request_success_total{{finished_reason="length",model_name="tiny"}} {server.done}.0\n'
        )

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server
    finally:
        await runner.cleanup()


async def healthy(real: RealVllm) -> None:
    await real.start()
    await until(
        lambda: real.state, 5, "the real vLLM (a stand-in) healthy", ok=lambda state: state == "healthy"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_the_real_pods_share_goes_to_the_server_as_completions_and_its_open_requests_are_its_load(
    stand_in: StandIn,
) -> None:
    real = RealVllm(stand_in)  # type: ignore[arg-type]
    await healthy(real)
    clock = Clock()
    engines = DemoEngines(capacity_per_replica=10.0, clock=clock, real=real)
    try:
        for pod in ("llm-1", "llm-2"):
            engines.create(pod)
        engines.bind_real("llm-1", 0.0)
        assert engines.real_pod() == "llm-1" and real.pods == ["llm-1"]
        ready = {"llm-1": True, "llm-2": True}
        for _ in range(8):  # 2 s of 4 req/s
            clock.now += 0.25
            engines.route(4.0, ready)
            await asyncio.sleep(0.05)
        assert real.sent >= 2
        assert engines.load_of("llm-1") == real.outstanding  # the router's count: sent, not yet answered
        assert engines.busy_percent("llm-1") == 100.0 * min(real.outstanding, 4) / 4
        # the mock pod took the rest: its queue is the same size as the real pod's open requests, or less
        assert engines.load_of("llm-2") > 0
        await asyncio.sleep(stand_in.delay_s + 0.3)
        assert real.answered == real.sent and real.outstanding == 0 and real.failed == 0
        assert stand_in.bodies[0] == {
            "model": MODEL_NAME,
            "prompt": "gpu scale",
            "max_tokens": real.max_tokens,
            "ignore_eos": True,
        }
    finally:
        await engines.close()
        summary = await real.close()
    assert stand_in.stopped >= 1 and stand_in.killed == 0  # healthy: SIGTERM first
    assert summary.sent == real.sent and summary.success_total == stand_in.done and summary.stopped
    assert summary.pods == ("llm-1",) and summary.first_served_at == 0.0


async def test_beyond_its_cap_of_open_requests_the_real_pod_gets_none_and_the_rest_is_shed(
    stand_in: StandIn,
) -> None:
    stand_in.delay_s = 1.0
    real = RealVllm(stand_in, max_outstanding=3)  # type: ignore[arg-type]
    await healthy(real)
    clock = Clock()
    engines = DemoEngines(capacity_per_replica=10.0, clock=clock, real=real)
    try:
        engines.create("llm-1")
        engines.bind_real("llm-1", 0.0)
        engines.route(0.0, {"llm-1": True})
        clock.now += 1.0
        engines.route(10.0, {"llm-1": True}, release=20.0)  # the only Ready pod: 10 + 20 held requests
        await asyncio.sleep(0.2)
        assert (real.sent, real.outstanding, real.shed) == (3, 3, 27)
        assert stand_in.running == 3
    finally:
        await engines.close()
        summary = await real.close()  # its open requests are cancelled
    assert summary.shed == 27 and summary.answered == 0


class FailingStandIn(StandIn):
    def launch(self, timeout: float = 300.0) -> None:
        raise EngineFailed(f"vLLM exited with code 1 before it was healthy; its log is {self.log}:\n  boom")


async def test_a_server_that_does_not_start_stops_the_demo_with_one_line_naming_its_log(
    tmp_path: Path,
) -> None:
    real = RealVllm(FailingStandIn(1, tmp_path / "vllm.log"))  # type: ignore[arg-type]
    await real.start()
    await asyncio.sleep(0.05)
    assert real.state == "failed"
    with pytest.raises(DemoError) as e:
        real.check()
    assert str(e.value) == (
        "--engine vllm: the real vLLM did not start: vLLM exited with code 1 before it was healthy; "
        f"its log is {tmp_path / 'vllm.log'}"
    )
    summary = await real.close()
    assert summary.healthy_after is None and summary.stopped
    assert real.server.killed == 1  # type: ignore[attr-defined]  # not healthy: nothing to stop gracefully


async def test_once_healthy_it_goes_to_the_pod_ready_longest_then_to_the_next_one_ready(
    stand_in: StandIn, socket_dir: Path
) -> None:
    real = RealVllm(stand_in)  # type: ignore[arg-type]
    cluster = DemoCluster(
        socket_dir, ["node-a"], gpus_per_node=2, capacity_per_replica=10.0, pending_s=1.5, loading_s=2.5,
        initial_replicas=2, engines=True, real=real,
    )  # fmt: skip
    await cluster.start()
    try:
        cluster.tick(0.5, 5.0)
        assert real.pod is None  # still starting: every pod on its mock engine
        await healthy(real)
        cluster.tick(1.0, 5.0)
        assert real.pod == "llm-1"  # the oldest: the last a scale-down removes
        annotations = cluster.api.pods[(NAMESPACE, "llm-1")]["metadata"]["annotations"]
        assert annotations[ANNOTATION] == str(stand_in.port)  # the agent scrapes the real server
        other = cluster.api.pods[(NAMESPACE, "llm-2")]["metadata"]["annotations"]
        assert other[ANNOTATION] != str(stand_in.port)
        assert [e.split(" vllm: ", 1)[1].split(";")[0].split(",")[0] for e in real.events] == [
            "the real vLLM is healthy",
            "llm-1's engine is now the real vLLM (its gpuscale.io/metrics-port → " + f"{stand_in.port})",
        ]

        cluster.wanted = 0  # both go; the real vLLM waits for the next pod Ready
        cluster.tick(2.0, 0.0)
        assert real.pod is None and "llm-1 deleted" in real.events[-1]
        cluster.wanted = 1
        cluster.tick(3.0, 0.0)
        assert real.pod is None  # llm-3 is Pending
        cluster.tick(7.5, 5.0)  # Ready at 3 + 1.5 + 2.5
        assert real.pod == "llm-3" and real.pods == ["llm-1", "llm-3"]
    finally:
        await cluster.stop()
        await real.close()


def test_the_compact_line_names_the_real_vllms_pod_and_what_the_agent_read() -> None:
    row = Row(
        t=30.0, phase="burst", demand=42.0, capacity=50.0, desired=5, pods=5, ready=5, value=3.0, target=5.0,
        active=True, stream_active=True, gpu_util=(80.0,), queue=3.0, vllm_pod="llm-1", vllm_waiting=2.0,
        vllm_running=4.0, vllm_outstanding=6.0, vllm_success=120.0,
    )  # fmt: skip
    line = plain_line(row, [GpuLine("node-a", 0, "llm-1", "Ready", 80.0, real=True)])
    assert "| real vLLM llm-1: waiting 2 running 4 finished 120 | util a0:80" in line
    before = Row(t=1.0, phase="idle", demand=0.0, capacity=0.0, desired=0, pods=0, ready=0, value=math.nan,
                 target=5.0, active=None, stream_active=None, gpu_util=(0.0,))  # fmt: skip
    assert "real vLLM" not in plain_line(before, [GpuLine("node-a", 0, None, None, 0.0)])


def shown(*args: Any) -> str:
    import io

    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render(*args))
    return console.export_text()


def test_the_live_view_marks_the_real_vllms_pod_and_shows_what_the_agent_read(tmp_path: Path) -> None:
    info = ViewInfo("wake", "llm-serving", 60.0, 5, 5, 10, 0, 6, 10.0, str(tmp_path))
    row = Row(
        t=30.0, phase="burst", demand=42.0, capacity=50.0, desired=5, pods=5, ready=5, value=3.0, target=5.0,
        active=True, stream_active=True, gpu_util=(80.0, 50.0), queue=3.0, vllm_pod="llm-1", vllm_waiting=2.0,
        vllm_running=4.0, vllm_outstanding=6.0, vllm_success=120.0,
    )  # fmt: skip
    gpus = [
        GpuLine("node-a", 0, "llm-1", "Ready", 80.0, real=True),
        GpuLine("node-a", 1, "llm-2", "Ready", 50.0),
    ]
    real = RealVllm(StandIn(4321, tmp_path / "vllm.log"))  # type: ignore[arg-type]
    real.state, real.pod, real.outstanding, real.sent = "healthy", "llm-1", 6, 130
    real.event(29.0, "llm-1's engine is now the real vLLM")
    text = shown(info, row, [row], gpus, ControllerStatus(), real)
    assert "llm-1 (Ready) real vLLM" in text and "llm-2 (Ready) real vLLM" not in text
    assert (
        "real vLLM  llm-1's engine, :4321: the agent read waiting 2, running 4; 6 open, 120 finished "
        "(vllm:request_success_total); sent 130, shed 0, failed 0"
    ) in text
    assert "t=29.0s vllm: llm-1's engine is now the real vLLM" in text

    real.state = "starting"
    starting = Row(t=1.0, phase="idle", demand=0.0, capacity=0.0, desired=0, pods=0, ready=0, value=math.nan,
                   target=5.0, active=None, stream_active=None, gpu_util=(0.0, 0.0))  # fmt: skip
    text = shown(info, starting, [starting], gpus[:0], ControllerStatus(), real)
    assert "real vLLM  starting (pid None, " in text and "about a minute on 2 cores" in text
