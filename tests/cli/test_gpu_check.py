"""``scripts/gpu-check`` fails when its proof fails: on a machine without a GPU it exits non-zero with one line
saying why, run as the README runs it (the system ``python3``) it uses the repository's ``.venv`` or says what
to install, and a step that fails makes it exit 1 naming the step."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check"
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)  # the interpreter the .venv was made from


def _has(python: str, module: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0


def _nvml_opens() -> bool:
    code = "import pynvml; pynvml.nvmlInit()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0


def _run(python: str, script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(script), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


needs_no_gpu = pytest.mark.skipif(_nvml_opens(), reason="NVML opens here: this machine has a GPU")


@needs_no_gpu
def test_without_a_gpu_it_exits_1_with_one_line() -> None:
    run = _run(sys.executable, SCRIPT, "--skip-load")
    assert run.returncode == 1, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("gpu-check: no NVIDIA GPU to prove here: NVML cannot be opened ("), line
    assert run.stdout == ""  # no JSON that could be read as a result


@needs_no_gpu
@pytest.mark.skipif(_has(BASE_PYTHON, "grpc"), reason="the base interpreter has gpuscale's dependencies")
def test_run_with_the_system_python_it_uses_the_venv() -> None:
    """As the README runs it: an interpreter without gpuscale's dependencies runs it again from .venv."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout")
    run = _run(BASE_PYTHON, SCRIPT, "--skip-load")
    assert run.returncode == 1, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("gpu-check: no NVIDIA GPU to prove here"), line  # the .venv's pynvml got that far
    assert "ModuleNotFoundError" not in run.stdout + run.stderr
    if not _has(
        str(ROOT / ".venv" / "bin" / "python"), "torch"
    ):  # the load needs torch: said before it starts
        run = _run(BASE_PYTHON, SCRIPT)
        assert run.returncode == 2, run.stderr
        (line,) = run.stderr.splitlines()
        assert line.startswith(
            f"gpu-check: cannot start: {ROOT / '.venv' / 'bin' / 'python'} (the repository's "
            f".venv, run since {BASE_PYTHON} lacked more) lacks torch: install them with "
        ), line
        assert line.endswith(" -m pip install torch; or --skip-load (no registry: docs/performance.md)"), line


@pytest.mark.skipif(_has(BASE_PYTHON, "grpc"), reason="the base interpreter has gpuscale's dependencies")
def test_without_a_venv_it_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "gpu-check"
    shutil.copy(SCRIPT, script)  # a checkout without .venv
    run = subprocess.run(
        [BASE_PYTHON, str(script), "--skip-load"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"gpu-check: cannot start: {BASE_PYTHON} lacks "), line
    assert "grpc" in line and f"install them with {BASE_PYTHON} -m pip install " in line
    assert "grpcio" in line and "aiohttp" in line


def _load_script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _main(module: ModuleType, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", ["gpu-check", *argv])
    monkeypatch.setattr(module, "preflight", lambda skip_load: None)
    code: int = module.main()
    return code


GOOD: dict[str, Any] = {
    "probe": {"returncode": 0, "result": {"gpus": [{"name": "NVIDIA H200"}]}},
    "timings": {"gpus": 1},
    "agent": {"dcgm_lines": ['DCGM_FI_DEV_GPU_UTIL{gpu="0"} 3']},
    "load": {"load_exit": 0, "mean_utilization": {"idle": 0.0, "load": 98.0, "after": 1.0}},
}


@pytest.mark.parametrize(
    ("step", "outcome", "why"),
    [
        (
            "probe",
            {"returncode": 2, "stderr": "Traceback…\ngpuscale: error: NVML cannot be loaded"},
            "probe: gpuscale probe exited 2: gpuscale: error: NVML cannot be loaded",
        ),
        (
            "timings",
            {"error": "NVMLError_GpuIsLost: GPU is lost"},
            "timings: NVMLError_GpuIsLost: GPU is lost",
        ),
        (
            "agent",
            {"error": "agent not ready in 30 s: no answer"},
            "agent: agent not ready in 30 s: no answer",
        ),
        ("agent", {"dcgm_lines": []}, "agent: the agent served no DCGM_FI_DEV_* series"),
        (
            "load",
            {"load_exit": 0, "mean_utilization": {"idle": 0.0, "load": 0.0, "after": 0.0}},
            "load: utilization did not rise under the load and fall after (idle 0.0, load 0.0, after 0.0)",
        ),
        ("load", {"load_exit": 1, "mean_utilization": {}}, "load: the PyTorch load exited 1"),
    ],
)
def test_a_failed_step_makes_it_exit_1_naming_the_step(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    step: str,
    outcome: dict[str, Any],
    why: str,
) -> None:
    module = _load_script()
    results = {**GOOD, step: outcome}
    monkeypatch.setattr(module, "probe", lambda: results["probe"])
    monkeypatch.setattr(module, "timings", lambda n: results["timings"])
    monkeypatch.setattr(module, "agent_check", lambda s: results["agent"])
    monkeypatch.setattr(module, "under_load", lambda s: results["load"])
    assert _main(module, monkeypatch) == 1
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == f"gpu-check: failed: {why}"
    assert json.loads(out)["failed_steps"] == {step: why.split(": ", 1)[1]}


def test_every_step_proved_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = _load_script()
    monkeypatch.setattr(module, "probe", lambda: GOOD["probe"])
    monkeypatch.setattr(module, "timings", lambda n: GOOD["timings"])
    monkeypatch.setattr(module, "agent_check", lambda s: GOOD["agent"])
    monkeypatch.setattr(module, "under_load", lambda s: GOOD["load"])
    assert _main(module, monkeypatch) == 0
    assert json.loads(capsys.readouterr().out)["proof"] == "complete"
    assert _main(module, monkeypatch, "--skip-load") == 0
    assert json.loads(capsys.readouterr().out)["proof"] == "partial: --skip-load"
