"""Failures a scenario injects into one policy's run (``faults:``), so fail-safe and fallback behaviour can be
seen before it runs.

* ``trigger-error`` from ``fromSeconds`` until ``untilSeconds``: every trigger of the policy fails (its
  source is down: the scaler answers ``UNAVAILABLE``, Prometheus does not answer); KEDA counts the failures
  and applies ``fallback``.
* ``samples-missing``: ``pods`` of the workload's pods (the oldest running ones) send no samples in that
  time: their node's agent is gone. The scaler keeps what it last had of them, which ages past
  ``staleAfter``; what it answers then is ``gpuscale.scaling``'s rule, exactly as the scaler answers it.
  Only gpuscale triggers read agent samples; for a ``prometheus`` trigger the fault changes nothing.

``untilSeconds`` absent: until the end. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FAULT_TYPES", "Fault"]

FAULT_TYPES = ("samples-missing", "trigger-error")


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Literal["samples-missing", "trigger-error"]
    from_seconds: int
    until_seconds: int | None = None
    pods: int = 0

    def active(self, t: float) -> bool:
        return self.from_seconds <= t and (self.until_seconds is None or t < self.until_seconds)
