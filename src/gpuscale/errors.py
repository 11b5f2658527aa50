"""Errors shared by every layer.

Hierarchy::

    GpuscaleError
    └── UsageError          bad input the user can fix (flag, file, pattern); the CLI prints it and exits 2
        └── ListenError     a server cannot listen on the address it was given (in use, not this host's)

Layers add their own under these: ``gpuscale.backends.errors`` (GPU reads), ``gpuscale.sim.errors``
(scenario files), ``gpuscale.scaler.errors`` (trigger metadata).
"""

from __future__ import annotations

__all__ = ["GpuscaleError", "ListenError", "UsageError"]


class GpuscaleError(Exception):
    """Base of every error gpuscale raises on purpose."""


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
