"""NVIDIA GPUs through NVML, with NVIDIA's official bindings (``nvidia-ml-py``, module ``pynvml``).

``pynvml`` is imported in ``open`` only, so this module loads on machines without it; its helpers take the
module as an argument. Every NVML error is converted here, in ``_device_error``; a field the part does not
support is ``None``. GPM activity (Hopper and newer) is read in ``_nvml_gpm``, XID errors are followed in
``_nvml_xid``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from ..model import DeviceInfo, GpuSample, ProcessSample, Vendor
from ._nvml_codes import ABSENT, KINDS, NOT_FOUND
from ._nvml_gpm import GpmState, gpm_activity, gpm_free, gpm_start, gpm_supported
from ._nvml_xid import XidWatch
from .errors import BackendUnavailable, DeviceError

__all__ = ["NvmlBackend"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_FI_DEV_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP: the HBM's temperature, °C (dcgm-exporter's MEMORY_TEMP)
# nvmlValue_t's member for each NVML_VALUE_TYPE_*
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _device_error(uuid: str, e: Exception) -> DeviceError:
    code = getattr(e, "value", None)
    return DeviceError(uuid, KINDS.get(code, "unknown") if isinstance(code, int) else "unknown", str(e))


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
        self._gpm: dict[str, GpmState] = {}
        self._memory_v2: bool | None = None  # nvmlDeviceGetMemoryInfo_v2 works here (None: not tried yet)
        self._xid: XidWatch | None = None
        self._xid_before: dict[str, int] = {}  # the last XIDs, across a reopen

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
        xid_stopped = True
        if self._xid is not None:
            self._xid_before = dict(self._xid.last)
            xid_stopped = self._xid.close()
            self._xid = None
        if not xid_stopped:  # its thread is still inside NVML: shutting NVML down under it could crash
            log.warning("NVML's event thread did not stop; NVML is left open until the process exits")
            self._gpm.clear()
            self._handles.clear()
            self._last_seen_us.clear()
            return
        if nvml is not None:
            for state in self._gpm.values():
                gpm_free(nvml, state)
        self._gpm.clear()
        self._handles.clear()
        self._last_seen_us.clear()
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def devices(self) -> Sequence[DeviceInfo]:
        return self._devices

    def xid_last(self, uuid: str) -> int | None:
        """The last XID error of GPU ``uuid`` (0: none), live: a lost GPU has no sample after its XID."""
        xid = self._xid
        if xid is None:  # closed, or a reopen that failed (the GPU fell off the bus): what was seen last
            return self._xid_before.get(uuid)
        return xid.last.get(uuid)

    # -- discovery ---------------------------------------------------------------------------------------
    def _optional(self, fn: Callable[..., T], *args: Any) -> T | None:
        nvml = self._nvml
        assert nvml is not None
        try:
            return fn(*args)
        except nvml.NVMLError as e:
            if getattr(e, "value", None) in ABSENT:
                return None
            raise

    def _discover(self, nvml: ModuleType) -> None:
        devices: list[DeviceInfo] = []
        driver = self._optional(nvml.nvmlSystemGetDriverVersion)
        if isinstance(driver, bytes):
            driver = driver.decode(errors="replace")
        count = nvml.nvmlDeviceGetCount()
        left_out: list[str] = []
        first_error: Exception | None = None
        for index in range(count):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvmlDeviceGetUUID(h)
                name = nvml.nvmlDeviceGetName(h)
                bus_id = nvml.nvmlDeviceGetPciInfo(h).busId
            except nvml.NVMLError as e:  # one GPU fallen off the bus must not cost the node its others
                left_out.append(f"GPU {index} ({e})")
                first_error = first_error or e
                continue
            bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
            mem = self._memory(nvml, h)
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
                    driver_version=driver,
                )
            )
            gpm = gpm_supported(nvml, h)
            if mig_enabled:
                instances = self._discover_mig(nvml, h, devices[-1])
                devices.extend(instances)
                if gpm:
                    for d in instances:
                        if d.gpu_instance_id is not None:
                            self._gpm_start(nvml, d.uuid, h, d.gpu_instance_id)
            elif gpm:
                self._gpm_start(nvml, uuid, h, None)
        if first_error is not None and not devices:
            raise first_error  # none can be read: the driver, not a GPU
        if left_out:
            log.warning(
                "%d of %d GPUs cannot be read and are left out until the backend is opened again: %s",
                len(left_out),
                count,
                "; ".join(left_out),
            )
        self._devices = tuple(devices)
        physical = {d.uuid: self._handles[d.uuid] for d in devices if not d.is_mig}
        if hasattr(nvml, "nvmlEventSetCreate"):
            try:
                self._xid = XidWatch(nvml, physical, self._xid_before)
            except nvml.NVMLError as e:
                log.info("NVML events unavailable (%s): no XID errors on /metrics", e)

    def _gpm_start(self, nvml: ModuleType, uuid: str, target: Any, gpu_instance_id: int | None) -> None:
        state = gpm_start(nvml, target, gpu_instance_id)
        if state is not None:
            self._gpm[uuid] = state

    def _memory(self, nvml: ModuleType, h: Any) -> Any:
        """Memory info, v2 where the driver has it: its ``used`` leaves out the memory the driver and firmware
        reserve (``total = free + used + reserved``, as dcgm-exporter's FB_USED and FB_RESERVED split it),
        where v1 counts it as used, so an idle GPU read several hundred MiB used. v1 on older drivers."""
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None and self._memory_v2 is not False:
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(h, version=version)
            except nvml.NVMLError as e:
                if getattr(e, "value", None) not in ABSENT:
                    raise
                self._memory_v2 = False  # the driver lacks it: v1 from now on
            else:
                self._memory_v2 = True
                return mem
        return self._optional(nvml.nvmlDeviceGetMemoryInfo, h)

    def _mig_profile(self, nvml: ModuleType, mh: Any) -> str | None:
        """The profile's own name (``3g.40gb``, ``1g.10gb+me``), as the driver names the instance ("NVIDIA
        A100-SXM4-80GB MIG 3g.40gb") and dcgm-exporter labels it: computing it from the memory size gives
        ``3g.39gb``, since a 3g.40gb instance has 39.25 GiB. From the attributes only if the name has none."""
        name = self._optional(nvml.nvmlDeviceGetName, mh)
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        if isinstance(name, str) and " MIG " in f" {name} ":
            return name.rsplit("MIG", 1)[1].strip() or None
        attrs = self._optional(nvml.nvmlDeviceGetAttributes, mh)
        if attrs is None:
            return None
        return f"{attrs.gpuInstanceSliceCount}g.{round(attrs.memorySizeMB / 1024)}gb"

    def _discover_mig(self, nvml: ModuleType, parent_handle: Any, parent: DeviceInfo) -> list[DeviceInfo]:
        out: list[DeviceInfo] = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent_handle)):
            try:
                mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent_handle, i)
            except nvml.NVMLError as e:
                if getattr(e, "value", None) == NOT_FOUND:
                    continue  # an empty slot
                raise
            uuid = nvml.nvmlDeviceGetUUID(mh)
            mem = self._memory(nvml, mh)
            profile = self._mig_profile(nvml, mh)
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
                    driver_version=parent.driver_version,
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

    def _activity(self, nvml: ModuleType, uuid: str) -> dict[str, Any]:
        """GPM activity since the previous read of ``uuid``, in % (empty without GPM or an interval)."""
        state = self._gpm.get(uuid)
        return {} if state is None else gpm_activity(nvml, state)

    def _field_value(self, nvml: ModuleType, h: Any, field_id: int) -> float | None:
        """One NVML field value (``nvmlDeviceGetFieldValues``); ``None`` where the part or driver lacks it."""
        values = self._optional(nvml.nvmlDeviceGetFieldValues, h, [field_id])
        if not values or values[0].nvmlReturn != 0:
            return None
        kind = int(values[0].valueType)
        if not 0 <= kind < len(_VALUE_MEMBERS):
            return None
        value = float(getattr(values[0].value, _VALUE_MEMBERS[kind]))
        return value if math.isfinite(value) else None

    def _health(self, nvml: ModuleType, device: DeviceInfo, h: Any, mem: Any) -> dict[str, Any]:
        """dcgm-exporter's other default fields, for /metrics: memory temperature, clocks, energy, codecs,
        PCIe retries, remapped rows, reserved memory. Per physical GPU (a MIG instance has none of its own).
        A field the part lacks is absent."""
        reserved = getattr(mem, "reserved", None)
        out: dict[str, Any] = {"memory_reserved_bytes": None if reserved is None else int(reserved)}
        if device.is_mig:
            return out
        opt = self._optional
        clock = opt(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM)
        energy = opt(nvml.nvmlDeviceGetTotalEnergyConsumption, h)
        enc = opt(nvml.nvmlDeviceGetEncoderUtilization, h)
        dec = opt(nvml.nvmlDeviceGetDecoderUtilization, h)
        replays = opt(nvml.nvmlDeviceGetPcieReplayCounter, h)
        rows = opt(nvml.nvmlDeviceGetRemappedRows, h)
        out.update(
            memory_temperature_celsius=self._field_value(nvml, h, _FI_DEV_MEMORY_TEMP),
            mem_clock_mhz=None if clock is None else float(clock),
            energy_mj=None if energy is None else int(energy),
            encoder_utilization=None if enc is None else float(enc[0]),
            decoder_utilization=None if dec is None else float(dec[0]),
            pcie_replays=None if replays is None else int(replays),
        )
        if rows is not None:
            out.update(
                remapped_rows_correctable=int(rows[0]),
                remapped_rows_uncorrectable=int(rows[1]),
                row_remap_failed=bool(rows[3]),
            )
        return out

    def _read(self, nvml: ModuleType, device: DeviceInfo, h: Any) -> GpuSample:
        opt = self._optional
        now = self._clock()
        util = opt(nvml.nvmlDeviceGetUtilizationRates, h)
        mem = self._memory(nvml, h)
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
            **self._activity(nvml, device.uuid),
            **self._health(nvml, device, h, mem),
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
            if code in (0, NOT_FOUND):  # no process ran a kernel since `since`: all idle
                return {}
            if code in ABSENT:
                return None
            raise
        out: dict[int, float] = {}
        latest = since
        for s in samples:
            out[int(s.pid)] = max(out.get(int(s.pid), 0.0), float(s.smUtil))
            latest = max(latest, int(s.timeStamp))
        self._last_seen_us[uuid] = latest
        return out
