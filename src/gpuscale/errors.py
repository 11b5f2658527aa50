"""Errors shared by every layer.

Hierarchy::

    GpuscaleError
    ├── ExpositionError     a Prometheus exposition does not parse where gpuscale reads it (``exposition``)
    └── UsageError          bad input the user can fix (flag, file, pattern); the CLI prints it and exits 2
        ├── ListenError     a server cannot listen on the address it was given (in use, not this host's)
        └── UnreadableFile  a file the user named cannot be read, or is not UTF-8 text (``files.read_text``)

Layers add their own under these: ``gpuscale.backends.errors`` (GPU reads), ``gpuscale.sim.errors``
(scenario files), ``gpuscale.scaler.errors`` (trigger metadata).
"""

from __future__ import annotations

__all__ = ["ExpositionError", "GpuscaleError", "ListenError", "UnreadableFile", "UsageError"]


class GpuscaleError(Exception):
    """Base of every error gpuscale raises on purpose."""


class ExpositionError(GpuscaleError):
    """A body does not parse as the exposition it says it is (one line: what, and where): a line that does
    not parse, a series given twice, OpenMetrics without its "# EOF"."""


class UsageError(GpuscaleError):
    """Input the user can fix. The message is one line: what was wrong and what to do."""


class ListenError(UsageError):
    """A server cannot listen on ``address``: ``flag`` (``--grpc-address``…) says which setting gave it."""

    def __init__(self, flag: str, address: str, reason: str) -> None:
        self.flag, self.address, self.reason = flag, address, reason
        super().__init__(
            f"{flag} {address}: cannot listen there ({reason}); is another process using the port, "
            "or is the address not this host's?"
        )


class UnreadableFile(UsageError):
    """A file the user named (``what``: the flag, key or argument that names it) cannot be read: ``reason``
    says why (the system's words, or where the bytes stop being UTF-8)."""

    def __init__(self, what: str, path: str, reason: str) -> None:
        self.what, self.path, self.reason = what, path, reason
        super().__init__(f'{what} "{path}": cannot read it: {reason}')
