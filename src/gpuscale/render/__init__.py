"""Manifests for the paths to GPU autoscaling: KEDA ScaledObjects (external, external-push, prometheus) and
the Prometheus Adapter HPA. Pure functions: options in, objects or YAML text out."""

from __future__ import annotations

from .adapter import (
    HpaOptions,
    adapter_rule,
    adapter_values,
    hpa_documents,
    render_adapter_values,
    render_hpa,
)
from .scaledobject import MODES, ScaledObjectOptions, render_scaledobject, scaledobject_documents
from .target import Target, parse_target

__all__ = [
    "MODES",
    "HpaOptions",
    "ScaledObjectOptions",
    "Target",
    "adapter_rule",
    "adapter_values",
    "hpa_documents",
    "parse_target",
    "render_adapter_values",
    "render_hpa",
    "render_scaledobject",
    "scaledobject_documents",
]
