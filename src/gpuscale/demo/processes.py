"""The demo's child processes: ``gpuscale agent`` per node and ``gpuscale scaler``, run as in production.

Each child runs ``python -m gpuscale …`` in its own session (a terminal's Ctrl-C reaches only the demo, which
then stops them in order), with its output in a log file. The commands take no port 0, so ``free_ports``
asks the kernel for free loopback ports (all at once, so they differ); a child serves once its log says
"serving gRPC on :PORT".
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import ChildFailed

__all__ = ["Child", "free_ports", "log_tail", "start_child"]

_PORT = re.compile(r"serving gRPC on :(\d+)")


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free now (bound together, then released for the children)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` of a log, indented, for an error message ('' when it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("  " + line for line in text.splitlines()[-lines:])


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def check(self) -> None:
        """Raise ``ChildFailed`` if the process has exited."""
        code = self.process.returncode
        if code is not None:
            raise ChildFailed(self.name, f"exited with code {code}", self.log_path, log_tail(self.log_path))

    async def grpc_port(self, timeout_s: float) -> int:
        """The gRPC port from the child's log, once it serves."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            with contextlib.suppress(OSError):
                if m := _PORT.search(self.log_path.read_text(encoding="utf-8", errors="replace")):
                    return int(m.group(1))
            self.check()
            if loop.time() > deadline:
                raise ChildFailed(
                    self.name, f"did not serve within {timeout_s:g} s", self.log_path, log_tail(self.log_path)
                )
            await asyncio.sleep(0.05)

    async def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


async def start_child(name: str, args: Sequence[str], log_path: Path) -> Child:
    """Start ``python -m gpuscale ARGS`` with stdout and stderr to ``log_path``."""
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gpuscale",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    return Child(name, process, log_path)
