"""Test-only backends that fail on command (kept out of the production backend table)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpuscale.backends.errors import BackendUnavailable, DeviceError
from gpuscale.backends.mock import MockBackend, MockConfig
from gpuscale.backends.patterns import parse_patterns
from gpuscale.model import DeviceInfo, GpuSample


class FlakyBackend:
    """A mock backend whose GPUs can be made to fail, hang, or lose the driver, from the test."""

    name = "flaky"

    def __init__(self, gpus: int = 2, patterns: str = "constant:0", node: str = "node-a") -> None:
        self.inner = MockBackend(MockConfig(gpus=gpus, patterns=parse_patterns(patterns), node=node))
        self.failing: dict[int, str] = {}
        self.hang = threading.Event()
        self.hanging: set[int] = set()
        self.driver_gone = False
        self.opens = 0

    def fail(self, index: int, kind: str) -> None:
        self.failing[index] = kind

    def heal(self, index: int) -> None:
        self.failing.pop(index, None)

    def open(self) -> None:
        if self.driver_gone:
            raise BackendUnavailable("flaky", "driver not loaded", "load it")
        self.opens += 1
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def devices(self) -> Sequence[DeviceInfo]:
        return self.inner.devices()

    def sample(self, device: DeviceInfo) -> GpuSample:
        if device.index in self.hanging:
            self.hang.wait(10)
        if self.driver_gone:
            raise DeviceError(device.uuid, "driver", "Driver Not Loaded")
        kind = self.failing.get(device.index)
        if kind is not None:
            raise DeviceError(device.uuid, kind, f"injected {kind}")
        return self.inner.sample(device)
