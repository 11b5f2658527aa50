"""GPU Performance Monitoring (GPM, Hopper and newer) for the NVML backend.

Where ``nvmlGpmQueryDeviceSupport`` says so, each GPU (or, in MIG mode, each GPU instance, through
``nvmlGpmMigSampleGet`` on its parent) keeps two GPM samples. Every read takes one, and ``nvmlGpmMetricsGet``
gives the engine, SM, occupancy, tensor and DRAM activity over the interval since the previous read: the
sampling interval itself, with no extra wait. The first read of a device has no interval yet (``None``). A GPM
failure leaves those fields ``None`` and never fails the read. The same request gives a whole GPU's PCIe and
NVLink transmit and receive rates (dcgm-exporter's ``DCGM_FI_PROF_{PCIE,NVLINK}_{TX,RX}_BYTES``, for
/metrics). The bindings come in as an argument, never imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = ["GpmState", "gpm_activity", "gpm_free", "gpm_start", "gpm_supported"]

# GpmSample fields and their NVML_GPM_METRIC_* ids
_GPM_METRICS = (
    ("gr_engine_active", 1),  # GRAPHICS_UTIL: % of time any compute/graphics work was active
    ("sm_active", 2),  # SM_UTIL: % of SMs busy
    ("sm_occupancy", 3),  # SM_OCCUPANCY: % of warps active of the theoretical maximum
    ("tensor_active", 5),  # ANY_TENSOR_UTIL
    ("dram_active", 10),  # DRAM_BW_UTIL: % of the theoretical DRAM bandwidth
)
# GPM rates in MiB/s, of a whole GPU only (PCIe is the physical GPU's), as bytes/s
_GPM_RATES = (
    ("pcie_tx_bytes_per_s", 20),  # PCIE_TX_PER_SEC
    ("pcie_rx_bytes_per_s", 21),  # PCIE_RX_PER_SEC
    ("nvlink_rx_bytes_per_s", 60),  # NVLINK_TOTAL_RX_PER_SEC, all links (DCGM computes its own this way)
    ("nvlink_tx_bytes_per_s", 61),  # NVLINK_TOTAL_TX_PER_SEC
)
_MIB = 1 << 20


@dataclass
class GpmState:
    """One device's GPM state: ``previous`` (taken at the last read, or ``None``) and ``spare``, swapped at
    every read; one metrics request (a 19 KiB struct) reused."""

    target: Any  # the handle sampled: the GPU's, or the parent's for a MIG instance
    gpu_instance_id: int | None
    previous: Any
    spare: Any
    request: Any
    primed: bool = False


def gpm_supported(nvml: ModuleType, h: Any) -> bool:
    """Whether the GPU behind handle ``h`` has GPM (never for bindings or parts without it)."""
    query = getattr(nvml, "nvmlGpmQueryDeviceSupport", None)  # absent from bindings older than 11.525
    if query is None:
        return False
    try:
        return bool(query(h).isSupportedDevice)
    except nvml.NVMLError:
        return False


def gpm_start(nvml: ModuleType, target: Any, gpu_instance_id: int | None) -> GpmState | None:
    """Two samples and a metrics request for one device (``None`` if NVML cannot allocate the samples):
    ``target`` is the GPU's handle, or for a MIG instance its parent's with ``gpu_instance_id``."""
    try:
        previous = nvml.nvmlGpmSampleAlloc()
    except nvml.NVMLError:
        return None
    try:
        spare = nvml.nvmlGpmSampleAlloc()
    except nvml.NVMLError:
        nvml.nvmlGpmSampleFree(previous)
        return None
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    metrics = _GPM_METRICS if gpu_instance_id is not None else _GPM_METRICS + _GPM_RATES
    request.numMetrics = len(metrics)
    for i, (_, metric_id) in enumerate(metrics):
        request.metrics[i].metricId = metric_id
    return GpmState(target, gpu_instance_id, previous, spare, request)


def gpm_free(nvml: ModuleType, state: GpmState) -> None:
    """Free a device's two samples; a failure to is of no consequence."""
    for sample in (state.previous, state.spare):
        try:
            nvml.nvmlGpmSampleFree(sample)
        except nvml.NVMLError:
            pass


def gpm_activity(nvml: ModuleType, state: GpmState) -> dict[str, Any]:
    """GPM activity since the previous read, in % (empty without an interval)."""
    try:
        if state.gpu_instance_id is None:
            nvml.nvmlGpmSampleGet(state.target, state.spare)
        else:
            nvml.nvmlGpmMigSampleGet(state.target, state.gpu_instance_id, state.spare)
    except nvml.NVMLError:
        state.primed = False  # no interval to the next read either
        return {}
    state.previous, state.spare = state.spare, state.previous
    if not state.primed:
        state.primed = True
        return {}
    request = state.request
    request.sample1, request.sample2 = state.spare, state.previous  # older, newer
    try:
        nvml.nvmlGpmMetricsGet(request)
    except nvml.NVMLError:
        return {}
    return _metric_values(request)


def _metric_values(request: Any) -> dict[str, Any]:
    """The finite values a metrics request returned: activity clamped to 0 to 100 %, rates as bytes/s."""
    out = {}
    for i, (name, _) in enumerate(_GPM_METRICS + _GPM_RATES):
        if i >= request.numMetrics:
            break
        metric = request.metrics[i]
        value = float(metric.value)
        if metric.nvmlReturn != 0 or not math.isfinite(value):
            continue
        if i < len(_GPM_METRICS):
            out[name] = min(100.0, max(0.0, value))
        elif value >= 0:
            out[name] = value * _MIB
    return out
