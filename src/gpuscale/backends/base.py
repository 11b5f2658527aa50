"""The one interface every GPU backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..model import DeviceInfo, GpuSample

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """Reads GPUs. Not thread-safe: one owner (the agent's sampling loop, or ``probe``) calls it.

    ``open`` loads the vendor library and discovers devices (raises ``BackendUnavailable``); ``devices``
    returns what ``open`` found; ``sample`` reads one device now (raises ``DeviceError`` for that device
    only; fields the device does not support are ``None``); ``close`` releases the library and may be
    followed by ``open`` again (after a driver reload).
    """

    @property
    def name(self) -> str:
        """``nvml``, ``amdsmi``, ``mock`` (``auto`` until it has chosen one of them)."""

    def open(self) -> None: ...

    def close(self) -> None: ...

    def devices(self) -> Sequence[DeviceInfo]: ...

    def sample(self, device: DeviceInfo) -> GpuSample: ...
