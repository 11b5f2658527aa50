"""GPU backends behind one Protocol, picked by name.

``BACKENDS`` maps each name to a factory; ``open_backend`` opens one, resolving ``auto`` to NVML if it
loads, else AMD SMI, else a clear error. Vendor libraries are imported only inside their modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import UsageError
from .amdsmi import AmdSmiBackend
from .base import Backend
from .errors import BackendError, BackendUnavailable, DeviceError
from .mock import MockBackend, MockConfig
from .nvml import NvmlBackend

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "DeviceError",
    "MockBackend",
    "MockConfig",
    "create_backend",
    "open_backend",
]

BACKEND_NAMES = ("amdsmi", "auto", "mock", "nvml")


def create_backend(name: str, *, mock: MockConfig | None = None) -> Backend:
    """A backend by name, not yet open. ``auto`` is resolved by ``open_backend``."""
    factories: Mapping[str, Callable[[], Backend]] = {
        "amdsmi": AmdSmiBackend,
        "mock": lambda: MockBackend(mock or MockConfig()),
        "nvml": NvmlBackend,
    }
    factory = factories.get(name)
    if factory is None:
        raise UsageError(f'backend "{name}" is unknown; choose one of {", ".join(BACKEND_NAMES)}')
    return factory()


def open_backend(name: str, *, mock: MockConfig | None = None) -> Backend:
    """Create and open a backend. ``auto``: NVML if it loads, else AMD SMI, else ``BackendUnavailable``."""
    if name != "auto":
        backend = create_backend(name, mock=mock)
        backend.open()
        return backend
    reasons = []
    for candidate in ("nvml", "amdsmi"):
        backend = create_backend(candidate)
        try:
            backend.open()
        except BackendUnavailable as e:
            reasons.append(f"{candidate}: {e.reason}")
            continue
        return backend
    raise BackendUnavailable(
        "auto",
        "no GPU library loaded (" + "; ".join(reasons) + ")",
        "install NVIDIA's or AMD's driver, or choose --backend mock",
    )
