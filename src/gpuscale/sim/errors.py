"""Errors of the simulator.

Hierarchy::

    GpuscaleError
    └── SimError             base of every error ``gpuscale.sim`` raises on purpose
        └── ScenarioError    a scenario file is invalid; ``problems`` lists every one found, each naming
                             the field, the value and what is allowed

The simulator imports no service, client or gRPC (it decides with ``gpuscale.scaling``); the CLI converts
``ScenarioError`` into the package-wide ``gpuscale.errors.UsageError``.
"""

from __future__ import annotations

from ..errors import GpuscaleError

__all__ = ["ScenarioError", "SimError"]


class SimError(GpuscaleError):
    """Base of every error the simulator raises on purpose."""


class ScenarioError(SimError):
    """A scenario file is invalid. ``problems`` holds every problem found, in file order."""

    def __init__(self, problems: tuple[str, ...], *, source: str = "scenario") -> None:
        self.problems = problems
        self.source = source
        count = len(problems)
        head = f"{source}: {count} problem{'s' if count != 1 else ''}"
        super().__init__(head + "".join(f"\n  {p}" for p in problems))
