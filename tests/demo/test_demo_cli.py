"""``gpuscale demo`` as a user runs it: a real process (with its agents and scaler), its files, its exit code."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.cli import build_parser
from gpuscale.cli.demo import pattern_of, profile_of, wake_line
from gpuscale.demo import Wake
from gpuscale.demo.controller import ReplicaChange
from gpuscale.demo.settings import wake_of
from gpuscale.scaling.keys import ENGINE_METRICS
from gpuscale.scaling.profiles import ProfileSet


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_scales_out_under_the_burst_and_back_in(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "demo",
            "--profile",
            "online-inference",
            "--duration",
            "40",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=140,
        env={**os.environ, "COLUMNS": "160"},
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"timeline: {out / 'timeline.csv'}" in run.stdout
    assert f"plot:     {out / 'demo.png'}" in run.stdout
    assert "replicas 1 → " in run.stdout  # not a terminal: compact lines, and every replica change

    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 38
    assert {f"util_node-{n}_{i}" for n in "abc" for i in (0, 1)} <= set(rows[0])
    desired = [int(r["replicas_desired"]) for r in rows]
    phases = [r["phase"] for r in rows]
    start = desired[0]
    peak = max(d for d, p in zip(desired, phases, strict=True) if p in ("burst", "after the burst"))
    assert peak >= start + 2, desired  # scaled out under the burst
    peak_at = desired.index(peak)
    assert phases.index("burst") <= peak_at
    assert min(desired[peak_at:]) < peak, desired  # and back in after it
    assert desired[-1] < peak, desired
    ready = [int(r["replicas_ready"]) for r in rows]
    assert max(ready) >= start + 2  # the new pods became Ready: the loop closed through the mock GPUs
    assert any(r["scaler_value"] and float(r["scaler_value"]) > 0 for r in rows)

    png = (out / "demo.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    scaler_log = (out / "logs" / "scaler.log").read_text()
    assert "Traceback" not in scaler_log, scaler_log  # its shutdown included (a lookup of the API in flight)


@pytest.mark.parametrize(
    ("out", "why"),
    [
        ("a-file", "it is a file, not a directory"),
        ("a-file/sub", "Not a directory"),
        ("/proc/gpuscale-demo", "No such file or directory"),  # not even root may create it
    ],
)
def test_an_out_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path, out: str, why: str) -> None:
    (tmp_path / "a-file").write_text("not a directory\n")
    run = subprocess.run(
        [sys.executable, "-m", "gpuscale", "demo", "--duration", "20", "--out", out],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.splitlines() == [f'gpuscale: error: --out "{out}": cannot write there: {why}']
    assert run.stdout == ""  # refused before anything starts


WAKE_LINE = re.compile(r"^  t=\s*([\d.]+)s replicas (\d+) → (\d+): (KEDA|HPA): (.*)$")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_by_default_wakes_from_zero_at_the_gateways_demand_and_scales_on_the_engines_queue(
    tmp_path: Path,
) -> None:
    """The default, ``llm-serving`` behind the stand-in gateway: the workload starts at zero; the scaler reads
    the gateway as its request path, so KEDA's activation (0 → 1) is followed by the HPA's scale-up to the
    replicas the demand needs, decided by the request path; once pods are Ready, each runs a mock vLLM engine
    that the real agents discover (annotation, pod IP), scrape and parse, and the queue drives the replicas."""
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "gpuscale", "demo", "--duration", "40", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=140,
        env={**os.environ, "COLUMNS": "160"},
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "the wake pattern, profile llm-serving" in lines[0]
    (engines,) = [line for line in lines if line.startswith("engines:")]
    scrapes = int(engines.split("engines ", 1)[1].split(" times", 1)[0])
    assert scrapes >= 30, engines  # gpuscale_agent_engine_scrapes_total{result="ok"}: 0.5 s rounds

    # the wake, as printed: KEDA's activation, then the HPA to what the request path asks
    changes = [m.groups() for line in lines if (m := WAKE_LINE.match(line))]
    assert changes[0][1:4] == ("0", "1", "KEDA"), changes
    assert "request path" in changes[0][4] and "held at the gateway" in changes[0][4], changes
    _, old, new, by, why = changes[1]
    assert (old, by) == ("1", "HPA") and int(new) > 1, changes
    assert f"the scaler asked for {new} (request path " in why, changes
    assert "req/s ÷ replicaRate 10 req/s)" in why, changes
    (wake,) = [line for line in lines if line.startswith("wake:")]
    assert f"KEDA 0 → 1 at {float(changes[0][0]):.1f} s" in wake and f"the HPA 1 → {new} at " in wake, wake
    (gateway,) = [line for line in lines if line.startswith("gateway:")]
    assert "none timed out" in gateway, gateway

    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    desired = [int(r["replicas_desired"]) for r in rows]
    phases = [r["phase"] for r in rows]
    queue = [float(r["queue_waiting"]) for r in rows]
    held = [float(r["gateway_held"]) for r in rows]
    assert (desired[0], phases[0]) == (0, "idle")
    first_up = next(r for r in rows if int(r["replicas_desired"]) > 1)
    assert first_up["scaler_decided"].startswith("request path "), first_up  # decided by the gateway's demand
    assert float(first_up["path_demand_rps"]) > 10.0, first_up  # more than one replica's 10 req/s
    assert max(held) > 0  # requests waited at the gateway while no pod was Ready
    assert max(queue) > 0.5 * max(held)  # and went on to the first Ready pod's engine
    assert held[-1] == 0 and desired[-1] >= 1
    # The scaler's value is the queue as the agents read it: near the engines' own count (the demo samples
    # both once a second; the agents scrape every 0.5 s and the trigger's window is 2 s). scaleAhead (the
    # profile's) adds at most the present value: never more than twice the queue.
    read = [(float(r["scaler_value"]), r["scaler_decided"]) for r in rows if r["scaler_value"]]
    assert any(v > 0 for v, _ in read)
    assert all(v <= 2 * max(queue) + 1 for v, d in read if not d.startswith("request path")), read
    # how the scaler decided, from its /explain: the plain value, or one of the decisions it knows
    decided = {r["scaler_decided"] for r in rows}
    assert all(d == "" or d.startswith(("ahead ", "request path ")) or d in {"KV-cache guard", "N-1 guard", "all pods loading"}
               for d in decided), decided  # fmt: skip
    # which decision, as the scaler's /explain names it, agrees with its words
    kinds = {(r["scaler_decision"], r["scaler_decided"]) for r in rows if r["scaler_decided"]}
    assert kinds and all(words.startswith(kind) for kind, words in kinds), kinds
    (said,) = [line for line in lines if line.startswith("decided:")]
    assert "request path" in said, said
    scaler_log = (out / "logs" / "scaler.log").read_text()
    assert "Traceback" not in scaler_log, scaler_log


@pytest.mark.parametrize(
    ("argv", "profile"),
    [
        (["demo"], "llm-serving"),  # scripts/demo: the LLM case, on the pods' mock vLLM engines
        (["demo", "--pattern", "spike"], "llm-serving"),
        (["demo", "--control-plane", "real"], "online-inference"),  # its pods run no engines
        (["demo", "--profile", "online-inference"], "online-inference"),
    ],
)
def test_the_demo_runs_the_llm_case_unless_told_otherwise(argv: list[str], profile: str) -> None:
    assert profile_of(build_parser(argv).parse_args(argv)) == profile
    engines = ProfileSet.builtin()[profile].metric in ENGINE_METRICS
    assert engines == (profile == "llm-serving")


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["demo"], "wake"),  # at zero behind the gateway: it starts idle, so the wake is seen
        (["demo", "--pattern", "burst"], "burst"),
        (["demo", "--profile", "online-inference"], "burst"),  # one replica under a low load
        (["demo", "--control-plane", "real"], "burst"),
    ],
)
def test_the_default_pattern_starts_idle_where_the_workload_starts_at_zero(
    argv: list[str], pattern: str
) -> None:
    args = build_parser(argv).parse_args(argv)
    assert pattern_of(args, profile_of(args)) == pattern


def test_the_wake_in_one_line() -> None:
    activated = ReplicaChange(6.8, 0, 1, "KEDA", "StreamIsActive true", "request path 8.3 req/s", 8.3)
    scaled = ReplicaChange(11.0, 1, 5, "HPA", "metric above target", "request path 45.6 req/s", 45.6, 5)
    changes = [activated, scaled, ReplicaChange(16.0, 5, 6, "HPA", "metric above target")]
    wake = wake_of(6.0, changes, 10.8)
    assert wake == Wake(first_request=6.0, activated=activated, scaled=scaled, first_ready=10.8)
    assert wake_line(wake) == (
        "the first request at 6.0 s; KEDA 0 → 1 at 6.8 s (StreamIsActive true); the HPA 1 → 5 at 11.0 s, "
        "asked for on request path 45.6 req/s; the first pod Ready at 10.8 s, 4.8 s after the first request"
    )
    assert wake_of(None, changes, 10.8) is None  # nothing arrived: no wake


def test_an_engine_profile_on_the_real_control_plane_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gpuscale", "demo", "--control-plane", "real", "--profile", "llm-serving"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.splitlines() == [
        'gpuscale: error: --profile "llm-serving" scales on an engine signal (queue_length), which only the '
        "stand-in control plane's pods serve; use --control-plane stand-in, or a GPU profile with "
        "--control-plane real"
    ]
