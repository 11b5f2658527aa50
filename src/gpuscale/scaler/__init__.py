"""The KEDA external scaler.

Its pure core: ``metadata`` (trigger metadata parsed once into ``TriggerMetadata``, cached by
``MetadataCache``), ``selector`` (label selectors), ``profiles`` (named defaults, built-in and from YAML),
``aggregate`` (smoothing, aggregation and the value KEDA is given; time injected). No gRPC, no I/O except
``load_profiles`` reading its file.
"""

from __future__ import annotations

from .aggregate import Evaluation, GpuSeries, aggregate, evaluate, extractor, percentile, smooth
from .errors import MetadataError, NoDataError, ProfileError, ScalerError, SelectorError
from .metadata import MetadataCache, TriggerMetadata, metric_name, parse_metadata, target
from .profiles import BUILTIN_PROFILES, Profile, ProfileSet, load_profiles
from .selector import LabelSelector, Requirement, parse_selector

__all__ = [
    "BUILTIN_PROFILES",
    "Evaluation",
    "GpuSeries",
    "LabelSelector",
    "MetadataCache",
    "MetadataError",
    "NoDataError",
    "Profile",
    "ProfileError",
    "ProfileSet",
    "Requirement",
    "ScalerError",
    "SelectorError",
    "TriggerMetadata",
    "aggregate",
    "evaluate",
    "extractor",
    "load_profiles",
    "metric_name",
    "parse_metadata",
    "parse_selector",
    "percentile",
    "smooth",
    "target",
]
