"""Plots are optional: matplotlib comes with the ``plots`` extra (and ``dev``), not with the agent and scaler
image. The simulator and the demo write their CSV and JSON either way, and a PNG when matplotlib is there."""

from __future__ import annotations

__all__ = ["MISSING", "available"]

MISSING = "matplotlib is not installed; pip install 'gpuscale[plots]' for it"


def available() -> bool:
    """Whether matplotlib can be imported (the plotting modules import it themselves, lazily)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
