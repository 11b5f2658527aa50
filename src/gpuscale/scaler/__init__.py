"""The KEDA external scaler service: cluster state fed by the agents, workload resolution, and
``externalscaler.ExternalScaler`` answered from memory.

What a trigger means (metadata, profiles, selectors, smoothing, aggregation, the value KEDA gets) lives in
``gpuscale.scaling``, shared with the simulator; the names below are re-exported from there for callers
that knew them here. ``load_profiles`` reads a profiles file (the I/O the pure core does not do).
"""

from __future__ import annotations

from ..scaling import (
    BUILTIN_PROFILES,
    Evaluation,
    GpuSeries,
    LabelSelector,
    MetadataCache,
    MetadataError,
    NoDataError,
    Profile,
    ProfileError,
    ProfileSet,
    Requirement,
    ScalingError,
    SelectorError,
    TriggerMetadata,
    aggregate,
    evaluate,
    extractor,
    metric_name,
    parse_metadata,
    parse_selector,
    percentile,
    smooth,
    target,
)
from .errors import ScalerError
from .profiles_file import load_profiles

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
    "ScalingError",
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
