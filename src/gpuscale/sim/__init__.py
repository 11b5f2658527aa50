"""The offline HPA/KEDA simulator: pure, deterministic, one-second steps, time injected.

Layers inside: ``hpa`` (data + replica calculator) < ``controller`` (one HPA sync) < ``keda`` (operator
loop, generated HPA) < ``workload`` (demand, the engines' queue, pod phases) / ``pipeline`` < ``engine`` (the
loop, the oracle) < ``summary`` < ``manifests`` / ``scenario`` (parsing) < ``report`` (run + write) <
``compare`` (the comparison table, the standard set) < ``plot`` (matplotlib, lazy). Imports nothing outside
``gpuscale.sim`` but ``gpuscale.scaling`` and ``gpuscale.model`` (the scaler's decisions, pure).
"""

from __future__ import annotations

from .errors import ScenarioError, SimError
from .loop import simulate
from .policy import Policy, Timeline
from .report import Outputs, Result, run_scenario, write_outputs
from .scenario import Scenario, parse_scenario
from .summary import Summary, summarize

__all__ = [
    "Outputs",
    "Policy",
    "Result",
    "Scenario",
    "ScenarioError",
    "SimError",
    "Summary",
    "Timeline",
    "parse_scenario",
    "run_scenario",
    "simulate",
    "summarize",
    "write_outputs",
]
