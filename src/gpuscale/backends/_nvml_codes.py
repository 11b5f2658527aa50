"""NVML return codes (``pynvml.NVML_ERROR_*``) and what each means to the NVML backend.

Kept apart from the bindings so that the classification reads, and the backend's modules share it, without
``pynvml`` loaded.
"""

from __future__ import annotations

__all__ = [
    "ABSENT",
    "KINDS",
    "NOT_FOUND",
    "TIMEOUT",
]

_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
TIMEOUT = 10
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_UNINITIALIZED = 1

# the part or the driver lacks the call: the field is None, not an error
ABSENT = frozenset({_NOT_SUPPORTED, _FUNCTION_NOT_FOUND})

# the DeviceError kind of each code that has one ("unknown" for the rest)
KINDS = {
    _NO_PERMISSION: "no_permission",
    _DRIVER_NOT_LOADED: "driver",
    _UNINITIALIZED: "driver",
    _LIB_RM_VERSION_MISMATCH: "driver",
    TIMEOUT: "timeout",
    _GPU_IS_LOST: "lost",
    _RESET_REQUIRED: "lost",
    _NOT_SUPPORTED: "not_supported",
    _FUNCTION_NOT_FOUND: "not_supported",
}
