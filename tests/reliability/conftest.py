"""Reliability tests reuse the scaler suite's loopback cluster (real agents on the mock backend, fake kubelet
and API server, real scalers) and its KEDA-like client."""

from __future__ import annotations

from tests.scaler.conftest import (  # noqa: F401  (fixtures, re-exported for this directory)
    Cluster,
    KedaClient,
    apiserver,
    cluster,
    keda,
)
