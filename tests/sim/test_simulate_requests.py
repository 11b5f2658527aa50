"""``gpuscale simulate --requests LOG``: the standard policies on a request log, end to end, on a slice of the
Azure conversation trace (tests/sim/data/README.md), and its bad flags: one line, exit code 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpuscale.cli import main
from gpuscale.cli.simulate_requests import iter_lines
from gpuscale.sim.requests import RequestLog, log_stats

SLICE = Path(__file__).parent / "data" / "azure-conv-600.csv"
SHARED = Path(os.environ.get("GPUSCALE_AZURE_CONV_TRACE", "/work/shared/traces/azure-llm-2023-conv.csv"))
POLICIES = (
    "prometheus-dcgm",
    "prometheus-vllm-queue",
    "gpuscale-gpu",
    "gpuscale-engine",
    "gpuscale-engine-ahead",
    "gpuscale-llm-serving",
    "oracle",
)


def test_a_log_runs_the_standard_policies_and_writes_the_scenario_it_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["simulate", "--requests", str(SLICE), "--profile", "llm-serving", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in POLICIES:
        assert f"\n{name} " in printed
    assert "p95 TTFT s" in printed
    for name in ("scenario.yaml", "timeline.csv", "summary.json"):
        assert (out / name).is_file()
    summary = json.loads((out / "summary.json").read_text())["policies"]
    assert tuple(summary) == POLICIES
    oracle = summary["oracle"]
    assert oracle["share_of_demand_unserved"] == 0
    assert oracle["requests_finished"] > 550
    assert 0 < oracle["p95_ttft_seconds"] < 2
    header = (out / "timeline.csv").read_text().splitlines()[0]
    assert header.endswith("ttft_seconds,running,finished,itl_seconds,output_tokens_per_second")
    # the written scenario is what ran: run again from it, the same figures
    again = tmp_path / "again"
    assert main(["simulate", str(out / "scenario.yaml"), "--out", str(again)]) == 0
    assert json.loads((again / "summary.json").read_text())["policies"] == summary


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--rate-scale", "0"], '--rate-scale "0": must be a number > 0'),
        (["--time-scale", "x"], '--time-scale "x": must be a number > 0'),
        (["--seed", "-1"], '--seed "-1": must be a whole number >= 0'),
        (["--format", "csv"], '--format "csv": must be one of [auto, azure, plain]'),
        (["--preset", "gpt-5"], '--preset "gpt-5": must be one of [llama-3.3-70b-fp8-2xh100]'),
        (
            ["--profile", "llm-latency"],
            '--profile "llm-latency": must be one of [batch-inference, llm-serving, online-inference, '
            "training-throughput] (the profiles on a metric the simulator feeds)",
        ),
        (["--jobs", "2"], "--jobs 2: only with --set"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    code = main(["simulate", "--requests", str(SLICE), "--out", str(tmp_path), *args])
    assert (code, capsys.readouterr().err) == (2, f"gpuscale: error: {expected}\n")


def test_requests_flags_need_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "scenarios/azure-conv.yaml", "--rate-scale", "2", "--out", str(tmp_path)])
    assert (code, capsys.readouterr().err) == (2, "gpuscale: error: --rate-scale: only with --requests\n")


def test_a_bad_row_is_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log.csv"
    log.write_bytes(b"seconds,prompt_tokens,output_tokens\n0,10,10\n1,ten,10\n")
    code = main(["simulate", "--requests", str(log), "--out", str(tmp_path / "out")])
    assert (code, capsys.readouterr().err) == (
        2,
        f'gpuscale: error: --requests {log}: "{log}" line 3, column "prompt_tokens": value "ten" must be a '
        "whole number of tokens >= 0\n",
    )


def test_a_missing_log_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "nope.csv"
    assert main(["simulate", "--requests", str(log), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f'gpuscale: error: --requests {log}: cannot read "{log}": No such file or directory\n'
    )


def test_the_shared_hour_reads_whole() -> None:
    """The whole shared trace (../shared/traces/README.md), where this machine has it."""
    if not SHARED.is_file():
        pytest.skip(f"no shared trace at {SHARED} (set GPUSCALE_AZURE_CONV_TRACE to its path)")
    stats = log_stats(iter_lines(SHARED), RequestLog(str(SHARED)), 3600)
    assert stats.requests == 19366
    assert round(stats.mean_output, 1) == 211.1
    assert sum(stats.counts) == 19366
