"""The tiers that share one expensive process per session (the control plane, the real vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest


def mark_tier(items: list[pytest.Item], here: Path, tier: str) -> None:
    """Every test under ``here`` gets the marker ``tier``, a 300 s timeout, and the xdist group ``tier``: under
    pytest-xdist (--dist loadgroup) the whole tier runs on one worker, which starts the process once."""
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(getattr(pytest.mark, tier))
            item.add_marker(pytest.mark.timeout(300))
            item.add_marker(pytest.mark.xdist_group(tier))
