"""A control-plane component as a child process: started in its own session with its output in
``<log_dir>/<name>.log``, checked, stopped with a grace period or killed as a crash would end it; and the HTTP
probe a component's readiness is read by. ``Process.failed`` is the one ``ComponentFailed`` a component
raises, when it exits or is not ready in time: it names the component and carries the last lines of its log,
so a failure says which and why. For fault tests a process can be paused (SIGSTOP: hung, its sockets open) and
resumed, and started ``again`` with the same command, environment and log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..demo.processes import log_tail
from .errors import ComponentFailed

__all__ = ["Process", "http_ok", "insecure_context", "start_process"]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def check(self) -> None:
        code = self.popen.poll()
        if code is not None:
            raise self.failed(f"exited with code {code}")

    def failed(self, what: str) -> ComponentFailed:
        return ComponentFailed(self.name, what, self.log_path, log_tail(self.log_path, 20))

    def kill(self) -> None:
        """SIGKILL, as a crash would end it."""
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()

    def pause(self) -> None:
        """SIGSTOP: it keeps its sockets open and answers nothing, as a hung process would."""
        self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT, after ``pause``."""
        self.popen.send_signal(signal.SIGCONT)

    def again(self) -> Process:
        """The same command started anew (after ``stop`` or ``kill``), its output appended to the same log."""
        return start_process(self.name, self.args, self.log_path.parent, self.env)

    def stop(self, grace_s: float = 5.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
                self.popen.send_signal(signal.SIGCONT)  # a paused process takes its SIGTERM once resumed
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()


def start_process(
    name: str, args: Sequence[str], log_dir: Path, env: dict[str, str] | None = None
) -> Process:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(args)}\n".encode())
        log.flush()
        popen = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    return Process(name, popen, log_path, tuple(args), env)


def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool | None:
    """A readiness probe for ``wait_for``: True when ``url`` answers 200."""
    with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
        return True if resp.status == 200 else None


def insecure_context() -> ssl.SSLContext:
    """A TLS context that checks no certificate: for a component's own self-signed health port."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
