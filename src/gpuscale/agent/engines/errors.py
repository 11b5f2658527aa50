"""Errors of the engine scrape.

Hierarchy::

    GpuscaleError
    ├── EngineError          an engine's metrics cannot be used
    └── ExpositionError      (``gpuscale.errors``) the body is not a valid exposition where gpuscale reads it

A scrape never raises these to its caller: the collector turns them into an ``EngineMissing`` whose
``reason`` is the ``gpuscale_agent_engine_scrapes_total`` result (``parse_error``).
"""

from __future__ import annotations

from ...errors import ExpositionError, GpuscaleError

__all__ = ["EngineError", "ExpositionError"]


class EngineError(GpuscaleError):
    """An engine's metrics cannot be used; the message is one line."""
