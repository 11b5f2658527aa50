"""Errors of the GPU backends.

Hierarchy::

    GpuscaleError
    └── BackendError                 anything a backend raises on purpose
        ├── BackendUnavailable       the library or driver cannot load (no NVML, no amdgpu): nothing to read
        └── DeviceError              one read of one device failed; other devices unaffected
            (``kind``: "lost", "not_supported", "timeout", "no_permission", "driver", "unknown")

Vendor exceptions (``pynvml.NVMLError``, ``amdsmi.AmdSmiException``) are converted in exactly one place, in
their backend module, with ``raise ... from e``.
"""

from __future__ import annotations

from ..errors import GpuscaleError

__all__ = ["DEVICE_ERROR_KINDS", "BackendError", "BackendUnavailable", "DeviceError"]

DEVICE_ERROR_KINDS = ("driver", "lost", "no_permission", "not_supported", "timeout", "unknown")


class BackendError(GpuscaleError):
    """Base of the backend errors."""


class BackendUnavailable(BackendError):
    """The backend cannot run on this machine. ``hint`` says what to do about it."""

    def __init__(self, backend: str, reason: str, hint: str) -> None:
        super().__init__(f"{backend} backend unavailable: {reason}; {hint}")
        self.backend = backend
        self.reason = reason
        self.hint = hint


class DeviceError(BackendError):
    """A read of one device failed. ``kind`` is one of ``DEVICE_ERROR_KINDS``."""

    def __init__(self, uuid: str, kind: str, message: str) -> None:
        if kind not in DEVICE_ERROR_KINDS:
            raise ValueError(f"unknown device error kind {kind!r}")
        super().__init__(f"{uuid}: {kind}: {message}")
        self.uuid = uuid
        self.kind = kind
        self.detail = message

    @property
    def recoverable_by_reopen(self) -> bool:
        """True when the driver itself went away: re-opening the backend may bring the device back."""
        return self.kind in ("driver", "lost")
