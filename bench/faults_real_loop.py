#!/usr/bin/env python3
"""Faults in the real loop, as measured by its end-to-end tests: runs ``tests/e2e/test_faults_real_loop.py``
(the real control plane and KEDA from ``gpuscale.controlplane``, gpuscale's agents and scaler; the timings
are in that module's docstring) with ``GPUSCALE_FAULTS_RESULTS`` set, and writes
bench/results/faults-real-loop.json: per fault, the held workload's ``spec.replicas`` (min/max) during the
fault and until it settled, the bystander's, what the loop showed meanwhile, the recovery time, and the
test's outcome (passed, xfailed, failed) and seconds from pytest's JUnit XML; the module's wall time.
Prints the Markdown table of docs/testing.md's "Faults in the real loop". Run ``scripts/control-plane
build`` first on a fresh machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from _common import ROOT, machine, write_result

MODULE = "tests/e2e/test_faults_real_loop.py"


def outcomes(junit: Path) -> dict[str, tuple[str, float]]:
    """Each test case's name (``test_x[id]``), its outcome and its seconds (setup, call and teardown)."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif (skipped := case.find("skipped")) is not None:
            outcome = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        out[case.get("name", "")] = (outcome, float(case.get("time", "nan")))
    return out


def table(doc: dict[str, Any]) -> str:
    rows = [
        "| fault | `llm` during: min | max | until settled: min | max | recovery | bystander | outcome |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for f in doc["faults"]:
        during, after = f["replicas_during"], f["replicas_until_settled"]
        rows.append(
            f"| {f['fault']} | {during['min']} | {during['max']} | {after['min']} | {after['max']} "
            f"| {f['recovery_s']:.1f} s | {'/'.join(map(str, f['bystander_replicas']))} | {f['outcome']} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="the JSON's path (default bench/results/faults-real-loop.json)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        raw, junit = Path(tmp) / "faults.json", Path(tmp) / "junit.xml"
        started = time.monotonic()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-n",
                "0",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
                MODULE,
            ],
            cwd=ROOT,
            env={**os.environ, "GPUSCALE_FAULTS_RESULTS": str(raw)},
            check=False,
        )
        wall = time.monotonic() - started
        if not raw.is_file():
            print(f"pytest exited {run.returncode} without results", file=sys.stderr)
            return 1
        doc = json.loads(raw.read_text())
        result = outcomes(junit)
    for f in doc["faults"]:
        f["outcome"], f["test_s"] = result.get(f["test"], ("unknown", float("nan")))
    doc["pytest_wall_s"] = round(wall, 1)
    doc["machine"] = machine()
    write_result("faults-real-loop.json", doc, args.out)
    print(table(doc))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
