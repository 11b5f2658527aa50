"""Where gpuscale keeps what it builds or installs once (the control plane, the real vLLM, the peer
benchmark's binary), and the lock that lets one process fill a cache directory while others wait.

``~/.cache/gpuscale`` (``$XDG_CACHE_HOME/gpuscale`` where set); each user names a directory in it by its
pinned versions and a hash, so a change of pins fills a new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cache_base", "locked"]


def cache_base() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuscale"


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``root`` (made if missing) while the block runs."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
