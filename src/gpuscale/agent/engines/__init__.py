"""Inference engines' own metrics, read on the node: ``discovery`` (where each GPU pod serves them),
``scrape`` (bounded HTTP), ``parse`` and ``mapping`` (into an ``EngineSample`` per pod); ``collector`` ties
them together and keeps a short history per pod."""

from __future__ import annotations

from .collector import EngineCollector, EngineResult
from .discovery import Endpoint, EndpointProblem, discover, endpoint_of, pods_holding_gpus
from .errors import EngineError, ExpositionError
from .mapping import ENGINES, EngineSpec, detect, map_exposition
from .scrape import RESULTS, Scraper, ScrapeSettings

__all__ = [
    "ENGINES",
    "RESULTS",
    "Endpoint",
    "EndpointProblem",
    "EngineCollector",
    "EngineError",
    "EngineResult",
    "EngineSpec",
    "ExpositionError",
    "ScrapeSettings",
    "Scraper",
    "detect",
    "discover",
    "endpoint_of",
    "map_exposition",
    "pods_holding_gpus",
]
