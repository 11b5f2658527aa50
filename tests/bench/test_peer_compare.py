"""bench/peer_compare.py where the Go peer's release source is not: one line and a skip (exit 0), with nothing
built, cached or written; the folder named by --peer-source or $GPUSCALE_PEER_SOURCE."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peer_compare.py"


def _run(tmp_path: Path, source: Path, how: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUSCALE_PEER_SOURCE"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    args = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "result.json"), *extra]
    if how == "argument":
        args += ["--peer-source", str(source)]
    else:
        env["GPUSCALE_PEER_SOURCE"] = str(source)
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)


@pytest.mark.parametrize("how", ["argument", "environment"])
@pytest.mark.parametrize("extra", [(), ("--build-only",)])
def test_a_missing_peer_source_is_one_line_and_a_skip(
    tmp_path: Path, how: str, extra: tuple[str, ...]
) -> None:
    missing = tmp_path / "shared" / "peer" / "keda-gpu-scaler-v0.6.0"
    done = _run(tmp_path, missing, how, *extra)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "keda-gpu-scaler skipped: its release source (github.com/pmady/keda-gpu-scaler v0.6.0) is not at "
        f"{missing} (--peer-source or GPUSCALE_PEER_SOURCE name another copy)\n"
    )
    assert not (tmp_path / "result.json").exists()
    assert not (tmp_path / "cache").exists()


def test_a_folder_of_another_module_is_one_line_and_a_skip(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "go.mod").write_text("module example.com/other\n\ngo 1.25\n")
    done = _run(tmp_path, other, "argument")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"keda-gpu-scaler skipped: {other}/go.mod is not module github.com/pmady/keda-gpu-scaler\n"
    )
    assert not (tmp_path / "result.json").exists()
