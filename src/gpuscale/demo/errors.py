"""Errors of the demo.

Hierarchy::

    GpuscaleError
    └── DemoError            the demo cannot go on (exit 1)
        └── ChildFailed      an agent or the scaler process exited or never came up; carries its log's tail
"""

from __future__ import annotations

from pathlib import Path

from ..errors import GpuscaleError

__all__ = ["ChildFailed", "DemoError"]


class DemoError(GpuscaleError):
    """The demo cannot go on; the message says what failed and where to look."""


class ChildFailed(DemoError):
    def __init__(self, name: str, what: str, log_path: Path, tail: str) -> None:
        super().__init__(f"{name} {what}; its log is {log_path}" + (f":\n{tail}" if tail else ""))
        self.name = name
        self.log_path = log_path
        self.tail = tail
