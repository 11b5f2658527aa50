"""Errors shared by every layer.

Hierarchy::

    GpuscaleError
    └── UsageError          bad input the user can fix (flag, file, pattern); the CLI prints it and exits 2

Layers add their own under these: ``gpuscale.backends.errors`` (GPU reads), ``gpuscale.sim.errors``
(scenario files), ``gpuscale.scaler.errors`` (trigger metadata).
"""

from __future__ import annotations

__all__ = ["GpuscaleError", "UsageError"]


class GpuscaleError(Exception):
    """Base of every error gpuscale raises on purpose."""


class UsageError(GpuscaleError):
    """Input the user can fix. The message is one line: what was wrong and what to do."""
