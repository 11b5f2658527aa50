"""Inference engines' own metrics, read on the node: discovery, scrape, parse and map; ``collector`` ties
them together."""

from __future__ import annotations

from .discovery import Endpoint, EndpointProblem, discover, endpoint_of, pods_holding_gpus

__all__ = ["Endpoint", "EndpointProblem", "discover", "endpoint_of", "pods_holding_gpus"]
