"""NVIDIA GPUs through NVML, with NVIDIA's official bindings (``nvidia-ml-py``, module ``pynvml``).

``pynvml`` is imported in ``open`` only, so this module loads on machines without it. Every NVML error is
converted here, in ``_device_error``; a field the part does not support is ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from ..model import DeviceInfo, GpuSample, ProcessSample, Vendor
from .errors import BackendUnavailable, DeviceError

__all__ = ["NvmlBackend"]

T = TypeVar("T")

# NVML return codes (pynvml.NVML_ERROR_*), kept here so the classification reads without the module loaded.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_TIMEOUT = 10
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_UNINITIALIZED = 1
_ABSENT = frozenset({_NOT_SUPPORTED, _FUNCTION_NOT_FOUND})
_KINDS = {
    _NO_PERMISSION: "no_permission",
    _DRIVER_NOT_LOADED: "driver",
    _UNINITIALIZED: "driver",
    _LIB_RM_VERSION_MISMATCH: "driver",
    _TIMEOUT: "timeout",
    _GPU_IS_LOST: "lost",
    _RESET_REQUIRED: "lost",
    _NOT_SUPPORTED: "not_supported",
    _FUNCTION_NOT_FOUND: "not_supported",
}


def _device_error(uuid: str, e: Exception) -> DeviceError:
    code = getattr(e, "value", None)
    return DeviceError(uuid, _KINDS.get(code, "unknown") if isinstance(code, int) else "unknown", str(e))


class NvmlBackend:
    """Reads NVIDIA GPUs (and MIG instances) through NVML.

    ``process_utilization``: also read per-process SM utilization (one more NVML call per GPU per sample).
    """

    name = "nvml"

    def __init__(self, *, process_utilization: bool = True, clock: Callable[[], float] = time.time) -> None:
        self._process_utilization = process_utilization
        self._clock = clock
        self._nvml: ModuleType | None = None
        self._devices: tuple[DeviceInfo, ...] = ()
        self._handles: dict[str, Any] = {}
        self._last_seen_us: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------------------
    def open(self) -> None:
        try:
            import pynvml
        except ImportError as e:
            raise BackendUnavailable(
                "nvml",
                "the nvidia-ml-py package is not installed",
                "install it with: pip install 'gpuscale[nvidia]'",
            ) from e
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise BackendUnavailable(
                "nvml",
                f"NVML did not load ({e})",
                "this machine needs NVIDIA's driver (libnvidia-ml.so.1); or run with --backend mock",
            ) from e
        self._nvml = pynvml
        try:
            self._discover(pynvml)
        except pynvml.NVMLError as e:
            self.close()
            raise BackendUnavailable(
                "nvml", f"listing GPUs failed ({e})", "check the driver with nvidia-smi"
            ) from e

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        self._handles.clear()
        self._last_seen_us.clear()
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def devices(self) -> Sequence[DeviceInfo]:
        return self._devices

    # -- discovery ---------------------------------------------------------------------------------------
    def _optional(self, fn: Callable[..., T], *args: Any) -> T | None:
        nvml = self._nvml
        assert nvml is not None
        try:
            return fn(*args)
        except nvml.NVMLError as e:
            if getattr(e, "value", None) in _ABSENT:
                return None
            raise

    def _discover(self, nvml: ModuleType) -> None:
        devices: list[DeviceInfo] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = nvml.nvmlDeviceGetUUID(h)
            name = nvml.nvmlDeviceGetName(h)
            bus_id = nvml.nvmlDeviceGetPciInfo(h).busId
            bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
            mem = self._optional(nvml.nvmlDeviceGetMemoryInfo, h)
            limit_mw = self._optional(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
            mig = self._optional(nvml.nvmlDeviceGetMigMode, h)
            mig_enabled = None if mig is None else bool(mig[0] == nvml.NVML_DEVICE_MIG_ENABLE)
            self._handles[uuid] = h
            devices.append(
                DeviceInfo(
                    index=index,
                    uuid=uuid,
                    name=name,
                    pci_bus_id=bus_id,
                    memory_total_bytes=None if mem is None else int(mem.total),
                    power_limit_watts=None if limit_mw is None else limit_mw / 1000.0,
                    vendor=Vendor.NVIDIA,
                    mig_enabled=mig_enabled,
                )
            )
            if mig_enabled:
                devices.extend(self._discover_mig(nvml, h, devices[-1]))
        self._devices = tuple(devices)

    def _discover_mig(self, nvml: ModuleType, parent_handle: Any, parent: DeviceInfo) -> list[DeviceInfo]:
        out: list[DeviceInfo] = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent_handle)):
            try:
                mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent_handle, i)
            except nvml.NVMLError as e:
                if getattr(e, "value", None) == _NOT_FOUND:
                    continue  # an empty slot
                raise
            uuid = nvml.nvmlDeviceGetUUID(mh)
            attrs = self._optional(nvml.nvmlDeviceGetAttributes, mh)
            mem = self._optional(nvml.nvmlDeviceGetMemoryInfo, mh)
            profile = None
            if attrs is not None:
                profile = f"{attrs.gpuInstanceSliceCount}g.{round(attrs.memorySizeMB / 1024)}gb"
            self._handles[uuid] = mh
            out.append(
                DeviceInfo(
                    index=parent.index,
                    uuid=uuid,
                    name=parent.name,
                    pci_bus_id=parent.pci_bus_id,
                    memory_total_bytes=None if mem is None else int(mem.total),
                    power_limit_watts=None,
                    vendor=Vendor.NVIDIA,
                    mig_enabled=True,
                    parent_uuid=parent.uuid,
                    mig_profile=profile,
                    gpu_instance_id=self._optional(nvml.nvmlDeviceGetGpuInstanceId, mh),
                    compute_instance_id=self._optional(nvml.nvmlDeviceGetComputeInstanceId, mh),
                )
            )
        return out

    # -- sampling ----------------------------------------------------------------------------------------
    def sample(self, device: DeviceInfo) -> GpuSample:
        nvml = self._nvml
        if nvml is None:
            raise DeviceError(device.uuid, "driver", "NVML is not open")
        h = self._handles.get(device.uuid)
        if h is None:
            raise DeviceError(device.uuid, "lost", "no such device in this NVML session")
        try:
            return self._read(nvml, device, h)
        except nvml.NVMLError as e:
            raise _device_error(device.uuid, e) from e

    def _read(self, nvml: ModuleType, device: DeviceInfo, h: Any) -> GpuSample:
        opt = self._optional
        now = self._clock()
        util = opt(nvml.nvmlDeviceGetUtilizationRates, h)
        mem = opt(nvml.nvmlDeviceGetMemoryInfo, h)
        if device.is_mig:
            temp = power_mw = limit_mw = clock = None
        else:
            temp = opt(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
            power_mw = opt(nvml.nvmlDeviceGetPowerUsage, h)
            limit_mw = opt(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
            clock = opt(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
        return GpuSample(
            uuid=device.uuid,
            timestamp=now,
            gpu_utilization=None if util is None else float(util.gpu),
            memory_utilization=None if util is None else float(util.memory),
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            temperature_celsius=None if temp is None else float(temp),
            power_watts=None if power_mw is None else power_mw / 1000.0,
            power_limit_watts=None if limit_mw is None else limit_mw / 1000.0,
            sm_clock_mhz=None if clock is None else float(clock),
            processes=self._processes(nvml, device, h),
        )

    def _processes(self, nvml: ModuleType, device: DeviceInfo, h: Any) -> tuple[ProcessSample, ...]:
        procs = self._optional(nvml.nvmlDeviceGetComputeRunningProcesses, h)
        if not procs:
            return ()
        sm: dict[int, float] | None = None
        if self._process_utilization and not device.is_mig:
            sm = self._sm_by_pid(nvml, device.uuid, h)
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            sm_util = None if sm is None else sm.get(int(p.pid), 0.0)
            out.append(ProcessSample(int(p.pid), None if used is None else int(used), sm_util))
        return tuple(out)

    def _sm_by_pid(self, nvml: ModuleType, uuid: str, h: Any) -> dict[int, float] | None:
        """SM utilization per pid from samples newer than the last call (1 s back on the first one)."""
        now_us = int(self._clock() * 1_000_000)
        since = self._last_seen_us.get(uuid, now_us - 1_000_000)
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(h, since)
        except nvml.NVMLError as e:
            code = getattr(e, "value", None)
            if code in (0, _NOT_FOUND):  # no process ran a kernel since `since`: all idle
                return {}
            if code in _ABSENT:
                return None
            raise
        out: dict[int, float] = {}
        latest = since
        for s in samples:
            out[int(s.pid)] = max(out.get(int(s.pid), 0.0), float(s.smUtil))
            latest = max(latest, int(s.timeStamp))
        self._last_seen_us[uuid] = latest
        return out
