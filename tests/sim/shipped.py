"""The shipped scenarios (``scenarios/``) as the CLI parses them: with the files they name (azure-conv's rate
trace, azure-conv-tokens' request log) read beside them."""

from __future__ import annotations

import functools
from pathlib import Path

from gpuscale.cli.simulate_requests import open_beside
from gpuscale.sim import Scenario, parse_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def parse_shipped(text: str, source: str = "scenario") -> Scenario:
    """``text`` (a shipped scenario's YAML, possibly edited) parsed with its files read from ``scenarios/``."""
    return parse_scenario(
        text,
        source=source,
        read_text=lambda f: (SCENARIOS / f).read_text(encoding="utf-8"),
        open_lines=functools.partial(open_beside, SCENARIOS),
    )
