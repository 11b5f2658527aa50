#!/usr/bin/env python3
"""What one engine scrape costs the agent: CPU per scrape + parse + map of a realistic vLLM exposition (every
default series of vLLM's PrometheusStatLogger, 2 models, their histograms: the mock engine's, 120 s into a
load above capacity), against the bare HTTP fetch of the same body on the same kind of session, in the same
run. Goal: under 1 ms of CPU per scrape.

Also, in-process (no HTTP): gpuscale's parse + map against prometheus_client's own parser + the same map, on
the same body, in both formats; and one ``EngineCollector`` round over 8 engine pods, as a share of one core
at 1 s sampling (goal: under 2 %).

The engine is served by a separate process (this script with ``--serve``), pinned to another core where
there are two, answering a precomputed body (text 0.0.4, or OpenMetrics when asked, as prometheus_client
negotiates), so the CPU measured here (``time.process_time``) is the scraping side's alone. The candidates
take turns call by call. Writes bench/results/engine-scrape.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import _common as c

MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct")


def bodies() -> tuple[bytes, bytes]:
    """The exposition in both formats, 120 s into 20 requests/s (above the 2 x 8 it serves)."""
    from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig

    clock = [1_700_000_000.0]
    engine = MockEngine(MockEngineConfig(models=MODELS), demand=lambda t: 20.0, clock=lambda: clock[0])
    clock[0] += 120
    text, _ = engine.exposition("")
    om, _ = engine.exposition("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8")
    return text, om


def serve(port: int, fmt: str) -> None:
    """The engine process: one precomputed body, as ``fmt`` (``text``) or negotiated (``negotiate``)."""
    from aiohttp import web

    c.exit_on_sigterm()
    text, om = bodies()
    text_type = "text/plain; version=0.0.4; charset=utf-8"
    om_type = "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8"

    async def metrics(request: web.Request) -> web.Response:
        if fmt == "negotiate" and "application/openmetrics-text" in request.headers.get("Accept", ""):
            return web.Response(body=om, headers={"Content-Type": om_type})
        return web.Response(body=text, headers={"Content-Type": text_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def start_server(fmt: str, cpu: int | None) -> tuple[subprocess.Popen[Any], int]:
    port = c.free_port()
    cmd = [sys.executable, __file__, "--serve", str(port), "--format", fmt]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()
            return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the engine process did not start") from None
            time.sleep(0.1)


async def interleaved(steps: dict[str, Callable[[], Awaitable[object]]], n: int) -> dict[str, Any]:
    """Each step ``n`` times, one call of each in turn (so the machine's drift hits all alike): CPU seconds
    per call (``time.process_time``) and the wall time of each call."""
    cpu = {name: 0.0 for name in steps}
    walls: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(n):
        for name, step in steps.items():
            c0, w0 = time.process_time(), time.perf_counter()
            await step()
            walls[name].append(time.perf_counter() - w0)
            cpu[name] += time.process_time() - c0
    return {"cpu": {k: v / n for k, v in cpu.items()}, "walls": walls}


def cpu_us(values: list[float]) -> dict[str, Any]:
    return {
        "mean": round(statistics.fmean(values) * 1e6, 1),
        "median": round(statistics.median(values) * 1e6, 1),
        "blocks": [round(v * 1e6, 1) for v in values],
    }


async def http_side(port: int, n: int, blocks: int, openmetrics: bool) -> dict[str, Any]:
    """Bare fetch against the full scrape, one call of each in turn, on one server."""
    import aiohttp
    from prometheus_client import CollectorRegistry

    from gpuscale.agent.engines.discovery import Endpoint
    from gpuscale.agent.engines.scrape import ACCEPT, Scraper, ScrapeSettings, read_body
    from gpuscale.model import EngineSample

    settings = ScrapeSettings(timeout=5.0)
    url = f"http://127.0.0.1:{port}/metrics"
    endpoint = Endpoint("http", "127.0.0.1", port, "/metrics", "gpuscale.io")
    scraper = Scraper(settings, CollectorRegistry())
    # the peer: the same kind of session (keep-alive, same headers), the body read and nothing else
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(keepalive_timeout=60, limit=0),
        headers={"Accept": ACCEPT, "Accept-Encoding": "identity"},
        read_bufsize=64 * 1024,
    )
    sizes: list[int] = []

    async def bare() -> None:
        async with session.get(url, allow_redirects=False) as r:
            sizes.append(len(await read_body(r.content, settings.max_body_bytes)))

    async def scrape() -> None:
        sample = await scraper.scrape(endpoint)
        assert isinstance(sample, EngineSample) and not sample.notes, sample

    try:
        for _ in range(50):  # warm up both (connections, caches)
            await bare()
            await scrape()
        fetched = await scraper.scrape(endpoint)
        runs = [await interleaved({"bare_fetch": bare, "scrape_parse_map": scrape}, n) for _ in range(blocks)]
    finally:
        await scraper.close()
        await session.close()
    results = {name: [r["cpu"][name] for r in runs] for name in ("bare_fetch", "scrape_parse_map")}
    walls = {name: [w for r in runs for w in r["walls"][name]] for name in ("bare_fetch", "scrape_parse_map")}
    bare_cpu = statistics.fmean(results["bare_fetch"])
    full_cpu = statistics.fmean(results["scrape_parse_map"])
    assert isinstance(fetched, EngineSample)
    return {
        "format": "openmetrics" if openmetrics else "text 0.0.4",
        "body_bytes": sizes[-1],
        "cpu_per_scrape_us": {k: cpu_us(v) for k, v in results.items()},
        "wall_per_scrape_ms": {k: c.summary_ms(v) for k, v in walls.items()},
        "parse_and_map_cpu_us": round((full_cpu - bare_cpu) * 1e6, 1),
        "ratio_scrape_to_bare_fetch": round(full_cpu / bare_cpu, 2),
        "goal_under_1ms": full_cpu < 1e-3,
        "models": [m.model for m in fetched.models],
    }


def in_process(text: str, openmetrics: bool, n: int, blocks: int) -> dict[str, Any]:
    """gpuscale's parse + map against prometheus_client's parser + the same map, on the same body."""
    from gpuscale.agent.engines.mapping import detect, map_exposition, selection
    from gpuscale.exposition import parse, reference_parse

    spec = detect(text)[0]
    sel = selection(spec)
    ours = map_exposition(spec, parse(text, sel, openmetrics=openmetrics), 0.0)
    theirs = map_exposition(spec, reference_parse(text, sel, openmetrics=openmetrics), 0.0)
    assert ours == theirs and ours is not None and not ours.notes
    runs: dict[str, list[float]] = {"gpuscale_parse_map": [], "prometheus_client_parse_map": []}
    every = 20  # the reference is ~20x slower: one call of it per 20 of ours, interleaved
    for _ in range(blocks):
        spent = {"gpuscale_parse_map": 0.0, "prometheus_client_parse_map": 0.0}
        for i in range(n):
            for name, fn in (("gpuscale_parse_map", parse), ("prometheus_client_parse_map", reference_parse)):
                if fn is reference_parse and i % every:
                    continue
                t0 = time.process_time()
                map_exposition(spec, fn(text, sel, openmetrics=openmetrics), 0.0)
                spent[name] += time.process_time() - t0
        runs["gpuscale_parse_map"].append(spent["gpuscale_parse_map"] / n)
        runs["prometheus_client_parse_map"].append(
            spent["prometheus_client_parse_map"] / len(range(0, n, every))
        )
    mean = {k: statistics.fmean(v) for k, v in runs.items()}
    return {
        "format": "openmetrics" if openmetrics else "text 0.0.4",
        "lines": text.count("\n"),
        "cpu_us": {k: cpu_us(v) for k, v in runs.items()},
        "speedup": round(mean["prometheus_client_parse_map"] / mean["gpuscale_parse_map"], 1),
        "same_sample": True,
    }


async def eight_pods(port: int, rounds: int) -> dict[str, Any]:
    """One EngineCollector round over 8 engine pods (one server), as the agent runs it each interval."""
    from prometheus_client import CollectorRegistry

    from gpuscale.agent.engines.collector import EngineCollector
    from gpuscale.agent.engines.scrape import ScrapeSettings
    from gpuscale.model import EngineSample, PodInfo

    annotations = {"gpuscale.io/metrics-port": str(port)}
    pods = {
        ("llm", f"vllm-{i}"): PodInfo("llm", f"vllm-{i}", f"u{i}", annotations=annotations, ip="127.0.0.1")
        for i in range(8)
    }
    collector = EngineCollector(ScrapeSettings.for_interval(1.0), CollectorRegistry())
    try:
        for _ in range(10):
            await collector.scrape_round(pods, set(pods))
        walls = []
        t0 = time.process_time()
        for _ in range(rounds):
            w0 = time.perf_counter()
            results = await collector.scrape_round(pods, set(pods))
            walls.append(time.perf_counter() - w0)
        cpu = (time.process_time() - t0) / rounds
    finally:
        await collector.close()
    assert all(isinstance(r, EngineSample) for r in results.values())
    return {
        "pods": len(pods),
        "cpu_per_round_ms": round(cpu * 1e3, 3),
        "wall_per_round_ms": c.summary_ms(walls),
        "core_percent_at_1s_sampling": round(cpu * 100, 2),
        "goal_under_2_percent": cpu < 0.02,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    text, om = bodies()
    pin = (0, 1) if (os.cpu_count() or 1) >= 2 and not args.no_pin else None
    if pin is not None:
        os.sched_setaffinity(0, {pin[0]})
    result: dict[str, Any] = {
        "machine": c.machine(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "pinned": {"client_cpu": pin[0], "engine_cpu": pin[1]} if pin else None,
        "exposition": {
            "models": list(MODELS),
            "text_bytes": len(text),
            "text_lines": text.count(b"\n"),
            "openmetrics_bytes": len(om),
        },
    }
    result["in_process"] = [
        in_process(text.decode(), False, args.n, args.blocks),
        in_process(om.decode(), True, args.n, args.blocks),
    ]
    result["http"] = []
    for fmt, openmetrics in (("text", False), ("negotiate", True)):
        proc, port = start_server(fmt, pin[1] if pin else None)
        try:
            result["http"].append(await http_side(port, args.n, args.blocks, openmetrics))
            if not openmetrics:
                result["eight_pods"] = await eight_pods(port, args.rounds)
        finally:
            c.stop(proc)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=500, help="scrapes per block (default 500)")
    p.add_argument("--blocks", type=int, default=4, help="blocks of n turns per candidate (default 4)")
    p.add_argument("--rounds", type=int, default=200, help="8-pod collector rounds (default 200)")
    p.add_argument(
        "--no-pin", action="store_true", help="do not pin the client and the engine to cores 0 and 1"
    )
    p.add_argument("--out", help="where to write the JSON (default bench/results/engine-scrape.json)")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    p.add_argument("--format", default="text", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.format)
        return 0
    result = asyncio.run(main_async(args))
    c.write_result("engine-scrape.json", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
