"""What a trigger means and what KEDA gets: the pure core the scaler, the simulator, ``render`` and the demo
share, so each of them decides with the same code.

- ``keys``: the one declarative table of trigger metadata keys (type, range, default, whether a profile may
  set it, one line of doc), from which parsing, its error messages and ``docs/metadata.md``'s key table come;
- ``metadata``: trigger metadata parsed once into a frozen ``TriggerMetadata`` (cached by ``MetadataCache``);
- ``profiles``: named defaults, built in and from YAML data;
- ``selector``: Kubernetes label selectors;
- ``ring``: a GPU's recent samples, kept in columns;
- ``aggregate``: per-GPU smoothing, aggregation, and the evaluation of one trigger over a set of GPU series
  into the value and activity KEDA receives.

Pure: no gRPC, no I/O, no clock of its own (time is an argument). It imports only ``gpuscale.model`` and
``gpuscale.errors``; an import-linter contract keeps it so.
"""

from __future__ import annotations

from .aggregate import Evaluation, GpuSeries, aggregate, evaluate, extractor, percentile, smooth
from .errors import MetadataError, NoDataError, ProfileError, ScalingError, SelectorError
from .metadata import MetadataCache, TriggerMetadata, metric_name, parse_metadata, target
from .profiles import BUILTIN_PROFILES, Profile, ProfileSet, parse_profiles, parse_profiles_text
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
    "ScalingError",
    "SelectorError",
    "TriggerMetadata",
    "aggregate",
    "evaluate",
    "extractor",
    "metric_name",
    "parse_metadata",
    "parse_profiles",
    "parse_profiles_text",
    "parse_selector",
    "percentile",
    "smooth",
    "target",
]
