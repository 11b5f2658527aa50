"""GPU backends behind one Protocol, picked by name.

``create_backend`` builds one by name; ``open_backend`` opens one. ``auto`` is NVML if it loads, else AMD SMI,
else a clear error, decided at each ``open`` until one opens (``AutoBackend``): an agent started before the
GPU operator has loaded the driver waits for it, unready, instead of exiting. Vendor libraries are imported
only inside their modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..errors import UsageError
from ..model import DeviceInfo, GpuSample
from .amdsmi import AmdSmiBackend
from .base import Backend
from .errors import BackendError, BackendUnavailable, DeviceError
from .mock import MockBackend, MockConfig
from .nvml import NvmlBackend

__all__ = [
    "BACKEND_NAMES",
    "AutoBackend",
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


class AutoBackend:
    """``auto``: whichever of NVML and AMD SMI opens first, tried again at every ``open`` until one does; then
    that one (a later ``open``, after a driver reload, re-opens it). ``name`` is ``auto`` until then."""

    def __init__(self) -> None:
        self._chosen: Backend | None = None

    @property
    def name(self) -> str:
        return "auto" if self._chosen is None else self._chosen.name

    def open(self) -> None:
        if self._chosen is not None:
            self._chosen.open()
            return
        self._chosen = open_backend("auto")

    def close(self) -> None:
        if self._chosen is not None:
            self._chosen.close()

    def devices(self) -> Sequence[DeviceInfo]:
        return () if self._chosen is None else self._chosen.devices()

    def sample(self, device: DeviceInfo) -> GpuSample:
        if self._chosen is None:
            raise BackendUnavailable("auto", "not open", "open() it first")
        return self._chosen.sample(device)

    def xid_last(self, uuid: str) -> int | None:
        """The chosen backend's, where it has one (NVML)."""
        live = getattr(self._chosen, "xid_last", None)
        return None if live is None else live(uuid)


def create_backend(name: str, *, mock: MockConfig | None = None) -> Backend:
    """A backend by name, not yet open."""
    factories: Mapping[str, Callable[[], Backend]] = {
        "auto": AutoBackend,
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
