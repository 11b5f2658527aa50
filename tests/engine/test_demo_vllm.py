"""``gpuscale demo --profile llm-serving --engine vllm`` as a user runs it: the real vLLM starts with the demo,
becomes one Ready pod's engine, the real agent reads it, the router's completions are served by it, and the
demo exits 0 having stopped it."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from gpuscale.demo.realvllm import server_readings
from gpuscale.vllmcpu import Engine
from tests.poll import until_sync

DURATION_S = 100  # the real vLLM is healthy after about a minute on 2 cores (80 s under load), then serves
STARTING = re.compile(r"^vllm: +starting the real vLLM .* on 127\.0\.0\.1:(\d+), pid (\d+):")
TAKEN = re.compile(r"^  t=\s*[\d.]+s vllm: (llm-\d+)'s engine is now the real vLLM")


def live_in_group(pgid: int) -> list[str]:
    """The processes of the process group ``pgid`` still alive (not zombies), as ``pid command``."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, tail = stat.read_text().rsplit(")", 1)
        except (OSError, ValueError):
            continue
        fields = tail.split()
        if fields[0] != "Z" and fields[2] == str(pgid):
            left.append(head.replace(" (", " ", 1))
    return left


def test_the_demo_runs_one_pod_on_the_real_vllm_the_agent_reads_it_and_it_is_stopped_at_the_end(
    vllm_engine: Engine, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    errors = tmp_path / "stderr"
    started = time.monotonic()
    with errors.open("w") as err:
        demo = subprocess.Popen(
            [
                sys.executable, "-m", "gpuscale", "demo", "--profile", "llm-serving", "--engine", "vllm",
                "--duration", str(DURATION_S), "--plain", "--out", str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
    lines: list[str] = []
    taken = threading.Event()
    port_pid: list[tuple[int, int]] = []

    def follow() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.append(line.rstrip("\n"))
            if m := STARTING.match(line):
                port_pid.append((int(m.group(1)), int(m.group(2))))
            if TAKEN.match(line):
                taken.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        assert taken.wait(DURATION_S + 60), "no pod got the real vLLM:\n" + "\n".join(lines)
        (port, pid), *_ = port_pid

        # as a user would check it: the server's own count of finished requests, while the demo runs
        def finished() -> float:
            assert demo.poll() is None, "the real vLLM finished no request:\n" + "\n".join(lines)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return server_readings(r.read().decode()).get("success", 0.0)
            except OSError:
                return 0.0

        until_sync(finished, DURATION_S + 60, "a request finished by the real vLLM", interval=2.0)
        demo.wait(timeout=DURATION_S + 90)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    reader.join(5)
    assert demo.stdout is not None
    demo.stdout.close()
    took = time.monotonic() - started
    assert demo.returncode == 0, "\n".join(lines) + errors.read_text()
    print(f"the demo took {took:.0f} s", *lines, sep="\n")

    # the summary: healthy, a pod's engine, completions answered, read by the agents, stopped
    (summary,) = [line for line in lines if line.startswith("vllm: ") and "healthy" in line]
    assert f"stopped (pid {pid})" in summary, summary
    answered = int(re.search(r"\((\d+) answered", summary).group(1))  # type: ignore[union-attr]
    assert answered > 0, summary
    readings = int(re.search(r"the agents read it (\d+) times", summary).group(1))  # type: ignore[union-attr]
    assert readings > 0, summary
    assert not live_in_group(pid), live_in_group(pid)  # the server and its engine core are gone

    # the timeline: the real vLLM's pod, and the agents' readings of it beside the mocks' queue
    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    served = [r for r in rows if r["vllm_pod"]]
    assert served, "no row names the real vLLM's pod"
    read = [r for r in served if r["vllm_waiting"] and r["vllm_running"]]
    assert read, "the agents' readings of the real vLLM never reached the timeline"
    assert max(float(r["vllm_success_total"] or 0) for r in served) > 0
    assert (out / "logs" / "vllm.log").stat().st_size > 0
    for log in ("scaler.log", "agent-node-a.log"):
        assert "Traceback" not in (out / "logs" / log).read_text(), log
