"""``gpuscale demo`` as a user runs it: a real process (with its agents and scaler), its files, its exit code."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.cli import build_parser
from gpuscale.cli.demo import profile_of
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


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_by_default_scales_on_the_mock_engines_queue(tmp_path: Path) -> None:
    """The default, ``llm-serving``: each pod runs a mock vLLM engine; the real agents discover (annotation,
    pod IP), scrape and parse it, and the scaler's queue_length answer drives the replicas."""
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "gpuscale", "demo", "--duration", "30", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=140,
        env={**os.environ, "COLUMNS": "160"},
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "profile llm-serving" in run.stdout.splitlines()[0]
    (engines,) = [line for line in run.stdout.splitlines() if line.startswith("engines:")]
    scrapes = int(engines.split("engines ", 1)[1].split(" times", 1)[0])
    assert scrapes >= 30, engines  # gpuscale_agent_engine_scrapes_total{result="ok"}: 0.5 s rounds

    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    desired = [int(r["replicas_desired"]) for r in rows]
    phases = [r["phase"] for r in rows]
    queue = [float(r["queue_waiting"]) for r in rows]
    before = desired[phases.index("burst")]
    assert max(queue) > 5 * before  # the burst outran the Ready replicas: the engines' queue grew
    assert max(desired) > before, desired  # and the replicas followed it
    # The scaler's value is the queue as the agents read it: near the engines' own count (the demo samples
    # both once a second; the agents scrape every 0.5 s and the trigger's window is 2 s).
    read = [(float(r["scaler_value"]), q) for r, q in zip(rows, queue, strict=True) if r["scaler_value"]]
    assert any(v > 0 for v, _ in read)
    # scaleAhead (the profile's) adds at most the present value: never more than twice the queue
    assert all(v <= 2 * max(queue) + 1 for v, _ in read)
    # how the scaler decided, from its /explain: the plain value, or one of the decisions it knows
    decided = {r["scaler_decided"] for r in rows}
    assert all(d == "" or d.startswith("ahead ") or d in {"KV-cache guard", "N-1 guard", "all pods loading"}
               for d in decided), decided  # fmt: skip
    if decided - {""}:
        assert any(line.startswith("decided:") for line in run.stdout.splitlines())


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
