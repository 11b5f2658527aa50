"""Errors of the real-vLLM engine tier.

Hierarchy::

    VllmCpuError      the real vLLM cannot be installed or served (the CLI exits 1)
    ├── BuildFailed   a step of the install failed: names the step, with its log's last lines
    └── EngineFailed  the server exited or never answered /health: its log's last lines
"""

from __future__ import annotations

__all__ = ["BuildFailed", "EngineFailed", "VllmCpuError"]


class VllmCpuError(Exception):
    """The engine tier cannot go on; the message says what failed and where to look."""


class BuildFailed(VllmCpuError):
    pass


class EngineFailed(VllmCpuError):
    pass
