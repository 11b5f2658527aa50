"""The shipped scenarios end to end, through the CLI sub-command, plus their golden results."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuscale.cli import simulate
from gpuscale.sim import parse_scenario, run_scenario
from tests.sim.shipped import parse_shipped

from .scenario_text import head, policy

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="gpuscale")
    simulate.register(parser.add_subparsers())
    args = parser.parse_args(["simulate", *argv])
    code: int = args.func(args)
    return code


def load(name: str) -> object:
    """A shipped scenario, with the files it names (azure-conv's trace) read beside it, as the CLI does."""
    return parse_shipped((SCENARIOS / name).read_text(encoding="utf-8"), source=name)


@pytest.mark.parametrize(
    "name",
    [
        "llm-step-burst.yaml",
        "spike-after-idle.yaml",
        "keda-averagevalue-trap.yaml",
        "k8s-docs-scale-down-policy.yaml",
    ],
)
@pytest.mark.timeout(120)  # llm-step-burst's eleven policies: 20-30 s on 2 cores under pytest-xdist
def test_cli_writes_the_three_outputs(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(str(SCENARIOS / name), "--out", str(tmp_path / "out")) == 0
    out = tmp_path / "out"
    lines = (out / "timeline.csv").read_text().splitlines()
    assert (
        lines[0]
        == "t,policy,demand,capacity,replicas_desired,replicas_ready,pods,metric_value,utilization_pct,"
        "served,unserved,waiting,kv_cache_pct,ttft_seconds"
    )
    summary = json.loads((out / "summary.json").read_text())
    scenario = parse_scenario((SCENARIOS / name).read_text())
    assert list(summary["policies"]) == [p.name for p in scenario.policies]
    assert len(lines) == 1 + len(scenario.policies) * scenario.duration_seconds
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out / 'plot.png'}" in capsys.readouterr().out


def test_every_shipped_scenario_parses() -> None:
    names = sorted(p.name for p in SCENARIOS.glob("*.yaml"))
    assert len(names) >= 5
    for name in names:
        load(name)


@pytest.mark.timeout(180)  # six simulated hours of nine policies: 45-60 s on 2 cores under pytest-xdist
def test_diurnal_day_runs(tmp_path: Path) -> None:
    scenario = parse_scenario((SCENARIOS / "diurnal-day.yaml").read_text())
    short = dataclasses.replace(scenario, duration_seconds=6 * 3600)  # the first 6 hours keep the test fast
    result = run_scenario(short)
    by = {s.policy: s for s in result.summaries}
    assert list(by) == [
        "prometheus-dcgm",
        "prometheus-vllm-queue",
        "gpuscale-gpu",
        "gpuscale-gpu-behavior",
        "gpuscale-engine",
        "gpuscale-engine-ahead",
        "gpuscale-llm-serving",
        "gpuscale-engine-gateway",
        "oracle",
    ]
    # the night: every utilization policy, the demand policies and the oracle serve it
    names = (
        "prometheus-dcgm",
        "gpuscale-gpu",
        "gpuscale-gpu-behavior",
        "gpuscale-engine",
        "gpuscale-engine-ahead",
        "gpuscale-engine-gateway",
    )
    for name in (*names, "oracle"):
        assert by[name].share_of_demand_unserved < 0.01, name
    # a queue-only trigger asks for ceil(0 / 5) = 1 replica whenever nothing waits, so it cannot hold the
    # capacity a served load needs: it flaps all night
    assert by["prometheus-vllm-queue"].direction_changes >= 20


def test_k8s_docs_scale_down_policy_sequence() -> None:
    # Pods 4/60s + Percent 10/60s, selectPolicy Max (the larger change = the lower floor), metric wants 10.
    # t=0:   start 80: min(80-4, int(80*0.9)=72) = 72
    # t=15..45: start = 72 + 8 removed in the last 60 s = 80 -> floor 72: held
    # t=60:  the 8-pod event (t=0) is not newer than 60-60 -> start 72: min(68, int(64.8)=64) = 64
    # t=120: min(60, int(57.6)) = 57; 180: min(53, int(51.3)) = 51; 240: min(47, int(45.9)) = 45
    # t=300: min(41, int(40.5)) = 40; 360: min(36, int(36.0)) = 36; from here Pods wins: 32, 28, 24, 20, 16, 12
    # t=780: start 12: min(8, int(10.8)=10) = 8 < desired 10 -> 10
    scenario = parse_scenario((SCENARIOS / "k8s-docs-scale-down-policy.yaml").read_text())
    tl = run_scenario(scenario).timelines[0]
    at_syncs = [tl.desired[t] for t in range(0, 900, 15)]
    assert at_syncs[:5] == [72, 72, 72, 72, 64]
    distinct = [v for i, v in enumerate(tl.desired) if i == 0 or v != tl.desired[i - 1]]
    assert [80, *distinct] == [80, 72, 64, 57, 51, 45, 40, 36, 32, 28, 24, 20, 16, 12, 10]
    changes = [t for t in range(1, 900) if tl.desired[t] != tl.desired[t - 1]]
    assert changes == [60 * k for k in range(1, 14)]


def test_averagevalue_trap_flaps_and_the_right_configurations_settle() -> None:
    result = run_scenario(parse_scenario((SCENARIOS / "keda-averagevalue-trap.yaml").read_text()))
    by = {s.policy: s for s in result.summaries}
    bad = by["bad-avg-util-averagevalue"]
    good = [by["gpuscale-workload-scope"], by["avg-util-metrictype-value"]]
    assert bad.direction_changes >= 10
    assert all(bad.direction_changes >= 5 * max(1, g.direction_changes) for g in good)
    # avg utilization <= 100 with AverageValue: ceil(100 / 70) = 2 is the most it can ever ask for
    assert bad.max_replicas == 2
    assert all(g.max_replicas == 6 for g in good)  # demand 40 / capacity 10 at 70 %: ceil(400 / 70) = 6
    assert bad.share_of_demand_unserved > 5 * max(g.share_of_demand_unserved for g in good)


def test_without_matplotlib_the_csv_and_json_are_written_and_the_plot_is_explained(tmp_path: Path) -> None:
    """matplotlib is the optional ``plots`` extra (not in the agent and scaler image)."""
    out = tmp_path / "out"
    blocked = (
        "import sys; sys.modules['matplotlib'] = None; from gpuscale.cli import main; "
        f"sys.exit(main(['simulate', {str(SCENARIOS / 'keda-averagevalue-trap.yaml')!r}, '--out', {str(out)!r}]))"
    )
    run = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert (out / "timeline.csv").exists() and (out / "summary.json").exists()
    assert not (out / "plot.png").exists()
    assert "no plot.png: matplotlib is not installed; pip install 'gpuscale[plots]' for it" in run.stdout


def _changes(desired: Sequence[int]) -> list[tuple[int, int]]:
    """(second, replicas) at every change of the desired replicas."""
    return [(t, desired[t]) for t in range(1, len(desired)) if desired[t] != desired[t - 1]]


PUSH_FALSE = head(
    name="push-false",
    duration=200,
    workload="{capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 0, initialReplicas: 2}",
    demand="{shape: step, before: 8, after: 1, atSeconds: 105}",
) + policy(
    """
    - type: prometheus
      metadata: {serverAddress: http://p, query: q, threshold: "4", activationThreshold: "0"}
    - type: external-push
      metadata: {scalerAddress: s:1, targetValue: "70", activationValue: "50"}
    """,
    name="prometheus-and-push",
    target="w",
    metadata="{name: w}",
    pipeline="{prometheus: {signal: demand}}",
    spec=["minReplicaCount: 0", "cooldownPeriod: 10", "pollingInterval: 30"],
)


def test_a_pushed_false_never_deactivates_a_workload_another_trigger_keeps_active() -> None:
    """KEDA 2.18+ (keda.md 2.6, kedacore/keda#6986): StreamIsActive's false is ignored; deactivation comes from
    polling and cooldownPeriod. The Prometheus trigger stays active (demand > 0), so replicas never reach 0."""
    tl = run_scenario(parse_scenario(PUSH_FALSE)).timelines[0]
    assert min(tl.desired) > 0


FALLBACK = head(
    name="fallback",
    duration=120,
    workload="{capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 0, initialReplicas: 2}",
) + policy(
    '[{type: prometheus, metricType: Value, metadata: {serverAddress: http://p, query: q, threshold: "70", '
    'ignoreNullValues: "false"}}]',
    name="query-returns-nothing",
    target="w",
    metadata="{name: w}",
    keys=["kedaPollOffsetSeconds: 20"],
    pipeline="{prometheus: {signal: avg(gpu_utilization), scrapeIntervalSeconds: 30, rangeSeconds: 1, "
    "scrapeOffsetSeconds: 29}}",
    spec=["minReplicaCount: 1", "fallback: {failureThreshold: 3, replicas: 6}"],
)


def test_fallback_reaches_the_hpa_after_more_than_failure_threshold_failures() -> None:
    """Fallback acts through the metrics server once NumberOfFailures > failureThreshold, never as a write by
    the operator. Since KEDA 2.19 (kedacore/keda#7244) the polling loop counts failures too: HPA syncs at 0 and
    15, the poll at 20, and the HPA sync at 30 is the 4th failure, the first in fallback. The HPA then moves at
    its own pace (legacy scale-up limit max(2 x 2, 4) = 4, then 6)."""
    tl = run_scenario(parse_scenario(FALLBACK)).timelines[0]
    assert _changes(tl.desired) == [(30, 4), (45, 6)]


IDLE = head(
    name="idle",
    duration=400,
    workload="{capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 0, initialReplicas: 3}",
    demand="{shape: constant, value: 0}",
) + policy(
    '[{type: prometheus, metadata: {serverAddress: http://p, query: q, threshold: "4"}}]',
    name="idle",
    target="w",
    metadata="{name: w}",
    keys=["newScaledObject: NEW"],
    pipeline="{prometheus: {signal: demand}}",
    spec=["minReplicaCount: 0", "initialCooldownPeriod: 0"],
)


@pytest.mark.parametrize(
    ("new", "changes"),
    [
        # ran before: active at t=0, so the cooldown (300 s) runs from there
        ("false", [(315, 1), (330, 0)]),
        # created at t=0: no lastActiveTime, so creation + initialCooldownPeriod (0) < now at the first poll
        ("true", [(30, 0)]),
    ],
)
def test_a_new_scaled_object_has_no_last_active_time(new: str, changes: list[tuple[int, int]]) -> None:
    tl = run_scenario(parse_scenario(IDLE.replace("NEW", new))).timelines[0]
    assert _changes(tl.desired) == changes
