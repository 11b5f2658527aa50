"""The standard set's ``gpuscale-engine-gateway`` policies are what ``gpuscale render scaledobject`` writes for
the same trigger: the same polling, cooldown, HPA behavior and trigger metadata, so the figures of
docs/decisions.md are those of the manifest a user deploys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.sim.compare import STANDARD_SET

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _gateway(trace: str) -> dict[str, Any]:
    doc = yaml.safe_load((SCENARIOS / f"{trace}.yaml").read_text())
    (policy,) = [p for p in doc["policies"] if p["name"] == "gpuscale-engine-gateway"]
    return dict(policy["scaledObject"])


def _render(so: dict[str, Any]) -> dict[str, Any]:
    spec = so["spec"]
    (trigger,) = spec["triggers"]
    md = trigger["metadata"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "render",
            "scaledobject",
            "--target",
            f"deployment/{spec['scaleTargetRef']['name']}",
            "--namespace",
            "ai",
            "--mode",
            trigger["type"],
            "--metric",
            md["metric"],
            "--target-value",
            md["targetValue"],
            "--min-replicas",
            str(spec["minReplicaCount"]),
            "--max-replicas",
            str(spec["maxReplicaCount"]),
            "--request-path",
            md["requestPath"],
            "--request-path-format",
            md["requestPathFormat"],
            "--request-path-match",
            md["requestPathMatch"],
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (obj,) = [d for d in yaml.safe_load_all(out) if d]
    return dict(obj)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("trace", [t for t in STANDARD_SET if (SCENARIOS / f"{t}.yaml").exists()])
def test_the_gateway_policy_is_what_render_writes(trace: str) -> None:
    so = _gateway(trace)
    rendered = _render(so)
    for key in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount", "advanced"):
        assert so["spec"][key] == rendered["spec"][key], key
    (mine,) = so["spec"]["triggers"]
    (theirs,) = rendered["spec"]["triggers"]
    assert mine["type"] == theirs["type"]
    assert {k: v for k, v in mine["metadata"].items() if k != "scalerAddress"} == {
        k: v for k, v in theirs["metadata"].items() if k != "scalerAddress"
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("trace", [t for t in STANDARD_SET if (SCENARIOS / f"{t}.yaml").exists()])
def test_the_llm_serving_policy_is_the_profile_as_render_writes_it(trace: str) -> None:
    doc = yaml.safe_load((SCENARIOS / f"{trace}.yaml").read_text())
    (policy,) = [p for p in doc["policies"] if p["name"] == "gpuscale-llm-serving"]
    spec = policy["scaledObject"]["spec"]
    engine = spec["triggers"][-1]
    assert {k: v for k, v in engine["metadata"].items() if k != "scalerAddress"} == {"profile": "llm-serving"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "render",
            "scaledobject",
            "--target",
            "deployment/llm",
            "--namespace",
            "ai",
            "--mode",
            "external-push",
            "--profile",
            "llm-serving",
            "--min-replicas",
            str(spec["minReplicaCount"]),
            "--max-replicas",
            str(spec["maxReplicaCount"]),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (rendered,) = [d for d in yaml.safe_load_all(out) if d]
    for key in ("pollingInterval", "cooldownPeriod", "advanced"):
        assert spec[key] == rendered["spec"][key], key
