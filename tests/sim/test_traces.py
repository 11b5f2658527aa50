"""The traces of the set that are not a formula: ``bursts-after-idle`` (random bursts from a seed) and
``azure-conv`` (a real hour, replayed from ``scenarios/traces/``), and ``scripts/trace-rate``, which derives
that file from the raw trace and must still give the same bytes."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuscale.files import read_text
from gpuscale.sim import Scenario, parse_scenario
from gpuscale.sim.workload import BurstsDemand, PointsDemand

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
SCRIPT = ROOT / "scripts" / "trace-rate"
RATE = SCENARIOS / "traces" / "azure-conv-rate.csv"
RAW = Path(os.environ.get("GPUSCALE_AZURE_CONV_TRACE", "/work/shared/traces/azure-llm-2023-conv.csv"))
ATTRIBUTION = (
    "Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, Ricardo Bianchini, "
    '"Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024'
)


def _load(name: str) -> Scenario:
    path = SCENARIOS / f"{name}.yaml"
    return parse_scenario(
        read_text(path, "scenario"),
        source=name,
        read_text=lambda f: read_text(path.parent / f, "demand file"),
    )


def _spec(name: str) -> dict[str, dict[str, object]]:
    """Each policy's ScaledObject spec (or oracle), by name, as the file writes it."""
    doc = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text(encoding="utf-8"))
    return {
        p["name"]: p["scaledObject"]["spec"] if "scaledObject" in p else p["oracle"] for p in doc["policies"]
    }


def _targets(scenario: Scenario) -> set[float]:
    return {
        s.trigger.metadata.target_value
        for p in scenario.policies
        for s in p.sources
        if s.via == "gpuscale" and s.trigger is not None and s.trigger.metadata is not None
        if s.trigger.metadata.metric == "request_rate"
    }


def test_bursts_after_idle_is_spike_after_idles_workload_and_policies_on_bursts_from_zero() -> None:
    bursts, spike = _load("bursts-after-idle"), _load("spike-after-idle")
    assert [p.name for p in bursts.policies] == [p.name for p in spike.policies]
    assert _spec("bursts-after-idle") == _spec("spike-after-idle")
    assert (bursts.duration_seconds, bursts.workload) == (3600, spike.workload)
    assert bursts.workload.initial_replicas == 0
    shape = bursts.demand
    assert isinstance(shape, BurstsDemand)
    assert len(shape.bursts) >= 10
    assert all(10 <= s <= 60 and 5 * 3.4 <= v <= 15 * 3.4 for _, s, v in shape.bursts)
    assert all(60 <= s <= 300 and 0 <= v <= 1 for _, s, v in shape.gaps[1:])
    # the biggest burst asks for maxReplicaCount at the target, 80 % of a replica's capacity
    assert _targets(bursts) == {0.8 * bursts.workload.capacity_per_replica}
    assert math.ceil(max(v for _, _, v in shape.bursts) / 6.4) == 8
    maxima = {s.get("maxReplicaCount", s.get("maxReplicas")) for s in _spec("bursts-after-idle").values()}
    assert maxima == {8}


def test_azure_conv_replays_the_rate_file_with_the_step_bursts_policies_and_the_gateway() -> None:
    conv, step = _load("azure-conv"), _load("llm-step-burst")
    main = [
        "prometheus-dcgm",
        "prometheus-vllm-queue",
        "gpuscale-gpu",
        "gpuscale-engine",
        "gpuscale-engine-ahead",
        "gpuscale-llm-serving",
        "gpuscale-engine-gateway",
        "oracle",
    ]
    assert [p.name for p in conv.policies] == main
    specs, step_specs = _spec("azure-conv"), _spec("llm-step-burst")
    assert {n: specs[n] for n in main if n != "gpuscale-engine-gateway"} == {
        n: step_specs[n] for n in main if n != "gpuscale-engine-gateway"
    }
    gateway = specs["gpuscale-engine-gateway"]
    assert (gateway["minReplicaCount"], gateway["maxReplicaCount"]) == (1, 12)
    up = gateway["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]  # type: ignore[index]
    assert {"type": "Pods", "value": 12, "periodSeconds": 15} in up["policies"]
    workload = conv.workload
    assert workload == dataclasses.replace(step.workload, initial_replicas=4)
    assert _targets(conv) == {0.8 * workload.capacity_per_replica}
    shape = conv.demand
    assert isinstance(shape, PointsDemand) and len(shape.points) == 350
    assert conv.duration_seconds == shape.points[-1][0] + 10
    peak = max(v for _, v in shape.points)
    assert math.ceil(peak / (0.8 * workload.capacity_per_replica)) == 8  # the peak needs 8 at the target
    cold_start = workload.provisioning_seconds + workload.load_seconds
    start = max(v for t, v in shape.points if t < cold_start)
    assert start <= workload.initial_replicas * workload.capacity_per_replica  # the start is served


def test_the_real_trace_keeps_its_attribution_wherever_it_goes() -> None:
    def flat(text: str) -> str:
        return " ".join(line.lstrip("# ").strip() for line in text.splitlines())

    for path in (SCENARIOS / "traces" / "README.md", SCENARIOS / "azure-conv.yaml", SCRIPT):
        text = flat(path.read_text(encoding="utf-8"))
        assert ATTRIBUTION in text and "CC-BY 4.0" in text, path


def _trace_rate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_rate_file_is_the_scripts_output_on_the_raw_trace() -> None:
    if not RAW.is_file():
        pytest.skip(
            f"no raw trace at {RAW} (GPUSCALE_AZURE_CONV_TRACE): the committed rate file is not rebuilt"
        )
    run = _trace_rate(str(RAW), "--bin", "10", "--scale", "3")
    assert run.returncode == 0, run.stderr
    assert run.stdout == RATE.read_text(encoding="utf-8"), "rebuild it: see scenarios/traces/README.md"


def test_the_script_counts_whole_bins_from_the_first_arrival(tmp_path: Path) -> None:
    raw = tmp_path / "raw.csv"
    stamps = ["12:00:05.5", "12:00:00.25", "12:00:04.9999999", "12:00:07", "12:00:12", "12:00:13.5"]
    raw.write_text("TIMESTAMP,Tokens\n" + "".join(f"2023-11-16 {s},1\n" for s in stamps), encoding="utf-8")
    run = _trace_rate(str(raw), "--bin", "5", "--scale", "2")
    assert run.returncode == 0, run.stderr
    # from 12:00:00.25: [0, 5) holds 2, [5, 10) 2, [10, 15) 1 and 12:00:13.5, the last, cuts it short: dropped
    assert run.stdout == "seconds,requests_per_second\n0,0.8\n5,0.8\n"
    out = tmp_path / "rate.csv"
    assert _trace_rate(str(raw), "--bin", "5", "--out", str(out)).returncode == 0
    assert out.read_text() == "seconds,requests_per_second\n0,0.4\n5,0.4\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--bin", "0"), 'argument --bin: "0" must be an integer > 0'),
        (("--bin", "2.5"), 'argument --bin: "2.5" must be an integer > 0'),
        (("--scale", "-1"), 'argument --scale: "-1" must be a number > 0'),
        (("--scale", "nan"), 'argument --scale: "nan" must be a number > 0'),
        (("--column", "arrival"), 'no column "arrival"; found [TIMESTAMP]'),
    ],
)
def test_the_script_refuses_bad_input(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    raw = tmp_path / "raw.csv"
    raw.write_text("TIMESTAMP\n2023-11-16 12:00:00\n", encoding="utf-8")
    run = _trace_rate(str(raw), *args)
    assert run.returncode != 0 and message in run.stderr
    assert run.stdout == ""
