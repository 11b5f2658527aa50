"""A stand-in for NVIDIA's ``pynvml`` (nvidia-ml-py) for tests on machines without a GPU.

It follows the real module's API as the NVML backend uses it: the same function names, return objects with
the same attribute names and units (bytes, mW, MHz, µs timestamps), and ``NVMLError`` carrying ``.value``
with NVML's return codes. Test-only; never in the production backend table.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_DEVICE_MIG_ENABLE = 1


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            3: "Not Supported",
            6: "Not Found",
            9: "Driver Not Loaded",
            12: "NVML Shared Library Not Found",
            15: "GPU is lost",
            10: "Timeout",
        }.get(self.value, f"Unknown Error {self.value}")


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    bus_id: str = "00000000:19:00.0"
    total: int = 143771 * 1024 * 1024
    used: int = 4 * 1024**3
    util_gpu: int = 37
    util_mem: int = 12
    temp: int = 41
    power_mw: int = 123_456
    limit_mw: int = 700_000
    sm_clock: int = 1980
    mig: tuple[int, int] | None = (0, 0)  # None: not supported
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    proc_util: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, smUtil, timeStamp µs)
    unsupported: set[str] = field(default_factory=set)  # function names raising NOT_SUPPORTED
    fail: int | None = None  # an NVML error code every read raises


def make_module(gpus: list[FakeGpu], *, init_error: int | None = None) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    for k, v in list(globals().items()):
        if k.startswith("NVML_"):
            setattr(m, k, v)
    state: dict[str, Any] = {"init": 0, "calls": []}
    m.state = state  # type: ignore[attr-defined]

    def check(h: FakeGpu, fn: str) -> FakeGpu:
        state["calls"].append(fn)
        if state["init"] <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if h.fail is not None:
            raise NVMLError(h.fail)
        if fn in h.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return h

    def nvmlInit() -> None:
        if init_error is not None:
            raise NVMLError(init_error)
        state["init"] += 1

    def nvmlShutdown() -> None:
        state["init"] -= 1

    def fn(name: str, getter: Any) -> None:
        def call(h: FakeGpu, *args: Any) -> Any:
            return getter(check(h, name), *args)

        setattr(m, name, call)

    m.nvmlInit = nvmlInit  # type: ignore[attr-defined]
    m.nvmlShutdown = nvmlShutdown  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]  # type: ignore[attr-defined]
    ns = types.SimpleNamespace
    fn("nvmlDeviceGetUUID", lambda g: g.uuid)
    fn("nvmlDeviceGetName", lambda g: g.name)
    fn("nvmlDeviceGetPciInfo", lambda g: ns(busId=g.bus_id.encode()))
    fn("nvmlDeviceGetMemoryInfo", lambda g: ns(total=g.total, used=g.used, free=g.total - g.used))
    fn("nvmlDeviceGetEnforcedPowerLimit", lambda g: g.limit_mw)
    fn("nvmlDeviceGetMigMode", lambda g: _mig(g))
    fn("nvmlDeviceGetUtilizationRates", lambda g: ns(gpu=g.util_gpu, memory=g.util_mem))
    fn("nvmlDeviceGetTemperature", lambda g, sensor: g.temp)
    fn("nvmlDeviceGetPowerUsage", lambda g: g.power_mw)
    fn("nvmlDeviceGetClockInfo", lambda g, clock: g.sm_clock)
    fn(
        "nvmlDeviceGetComputeRunningProcesses",
        lambda g: [
            ns(pid=p, usedGpuMemory=u, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for p, u in g.processes
        ],
    )
    fn("nvmlDeviceGetProcessUtilization", lambda g, since: _proc_util(g, since))
    return m


def _mig(g: FakeGpu) -> list[int]:
    if g.mig is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return list(g.mig)


def _proc_util(g: FakeGpu, since: int) -> list[Any]:
    rows = [
        types.SimpleNamespace(pid=p, smUtil=u, memUtil=0, encUtil=0, decUtil=0, timeStamp=t)
        for p, u, t in g.proc_util
        if t > since
    ]
    if not rows:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return rows
