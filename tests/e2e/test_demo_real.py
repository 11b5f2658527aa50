"""``gpuscale demo --control-plane real``: the demo's burst on the real control plane and KEDA scales the
Deployment out during the burst, and its timeline says so (what the HPA and the Deployment showed)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path


def test_the_real_demo_scales_out_during_the_burst(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = [sys.executable, "-m", "gpuscale", "demo", "--control-plane", "real", "--duration", "45",
            "--pattern", "burst", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "timeline:" in proc.stdout
    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 30
    burst = [r for r in rows if r["phase"] == "burst"]
    assert burst, {r["phase"] for r in rows}
    assert int(rows[0]["spec_replicas"]) == 1
    assert max(int(r["spec_replicas"]) for r in rows) >= 2, [r["spec_replicas"] for r in rows]
    assert max(int(r["running"]) for r in rows) >= 2
