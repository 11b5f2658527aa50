"""Errors of the control plane launcher.

Hierarchy::

    ControlPlaneError       the control plane cannot be built or started (the CLI exits 1)
    ├── BuildFailed         a Go build failed, or the toolchain or wrapper modules are missing
    ├── ComponentFailed     a process exited or never became ready; names it, with its log's last lines
    └── KubeRequestFailed   the API server answered a request with an error status
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BuildFailed", "ComponentFailed", "ControlPlaneError", "KubeRequestFailed"]


class ControlPlaneError(Exception):
    """The control plane cannot go on; the message says what failed and where to look."""


class BuildFailed(ControlPlaneError):
    pass


class ComponentFailed(ControlPlaneError):
    def __init__(self, name: str, what: str, log_path: Path, tail: str) -> None:
        super().__init__(f"{name} {what}; its log is {log_path}" + (f":\n{tail}" if tail else ""))
        self.name = name
        self.log_path = log_path
        self.tail = tail


class KubeRequestFailed(ControlPlaneError):
    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.method = method
        self.path = path
        self.status = status
        self.message = message
