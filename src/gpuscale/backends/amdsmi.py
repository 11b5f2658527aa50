"""AMD GPUs through AMD SMI (the ``amdsmi`` Python package, which needs the ``amdgpu`` driver).

``amdsmi`` is imported in ``open`` only. Every ``AmdSmiException`` is converted here, in ``_device_error``.
Units, from AMD's API reference: activity in percent (``"N/A"`` when unknown); VRAM from
``amdsmi_get_gpu_vram_usage`` in MB; power from ``amdsmi_get_power_info`` in W (``socket_power``, else
``current_socket_power``, else ``average_socket_power``); the power cap from ``amdsmi_get_power_cap_info``
in µW on bare metal; temperatures in °C (older releases documented millidegrees: values over 1000 are scaled).

Labels as AMD's device-metrics-exporter sets them (its gpuagent reads the same AMD SMI calls):
``card_model`` is the board's ``model_number``, else the ASIC's ``market_name``; ``serial_number`` the board's
``product_serial``; ``gpu_compute_partition_type`` and ``gpu_memory_partition_type`` lower-case (``spx``,
``nps1``; ``none`` where the GPU cannot be partitioned); ``gpu_partition_id`` from the accelerator partition
profile, else the KFD info, else ``NA``; ``deployment_mode`` from the virtualization mode (``baremetal``,
``hypervisor``, ``vm_vf``, ``vm_pf``, else ``baremetal``, the exporter's default). A call this AMD SMI lacks,
or that fails, gives the exporter's default: a label never costs a GPU its series.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from ..model import DeviceInfo, GpuSample, ProcessSample, Vendor
from .errors import BackendUnavailable, DeviceError

__all__ = ["AmdSmiBackend"]

log = logging.getLogger(__name__)

MB = 1024 * 1024

# AMD SMI status codes (amdsmi_status_t) that mean "this field is not there", or say what went wrong.
_STATUS_KINDS = {
    2: "not_supported",  # AMDSMI_STATUS_NOT_SUPPORTED
    3: "not_supported",  # AMDSMI_STATUS_NOT_YET_IMPLEMENTED
    10: "no_permission",  # AMDSMI_STATUS_NO_PERM
    11: "timeout",  # AMDSMI_STATUS_TIMEOUT (amdsmi_status_t ordering: see the API reference)
    35: "driver",  # AMDSMI_STATUS_DRIVER_NOT_LOADED
}


def _status(e: Exception) -> int | None:
    for attr in ("err_code", "error_code", "value"):
        code = getattr(e, attr, None)
        if isinstance(code, int):
            return code
    return None


def _device_error(uuid: str, e: Exception) -> DeviceError:
    code = _status(e)
    return DeviceError(uuid, _STATUS_KINDS.get(code, "unknown") if code is not None else "unknown", str(e))


_UINT32_MAX = 2**32 - 1
_COMPUTE_PARTITIONS = frozenset({"spx", "dpx", "tpx", "qpx", "cpx"})
_MEMORY_PARTITIONS = frozenset({"nps1", "nps2", "nps4", "nps8"})
# amdsmi_virtualization_mode_t → the exporter's deployment_mode
_DEPLOYMENT_MODES = {1: "baremetal", 2: "hypervisor", 3: "vm_vf", 4: "vm_pf"}


def _text(value: Any) -> str:
    """A string AMD SMI reports, with its "N/A" as the exporter's empty string."""
    text = "" if value is None else str(value).strip()
    return "" if text.upper() == "N/A" else text


def _number(value: Any) -> float | None:
    """AMD SMI reports unknown values as the string "N/A" (or sentinel maxima); those are absent."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value in (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return float(value)


class AmdSmiBackend:
    """Reads AMD Instinct/Radeon GPUs through AMD SMI."""

    name = "amdsmi"

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._smi: ModuleType | None = None
        self._devices: tuple[DeviceInfo, ...] = ()
        self._handles: dict[str, Any] = {}

    def open(self) -> None:
        try:
            import amdsmi
        except ImportError as e:
            raise BackendUnavailable(
                "amdsmi",
                "the amdsmi package is not installed",
                "install it with: pip install 'gpuscale[amd]'",
            ) from e
        try:
            amdsmi.amdsmi_init()
            handles = list(amdsmi.amdsmi_get_processor_handles())
        except (amdsmi.AmdSmiException, OSError) as e:
            raise BackendUnavailable(
                "amdsmi",
                f"AMD SMI did not load ({e})",
                "this machine needs the amdgpu driver; or run with --backend mock",
            ) from e
        self._smi = amdsmi
        try:
            self._discover(amdsmi, handles)
        except amdsmi.AmdSmiException as e:
            self.close()
            raise BackendUnavailable(
                "amdsmi", f"listing GPUs failed ({e})", "check the driver with amd-smi"
            ) from e

    def close(self) -> None:
        smi, self._smi = self._smi, None
        self._handles.clear()
        if smi is not None:
            try:
                smi.amdsmi_shut_down()
            except smi.AmdSmiException:
                pass

    def devices(self) -> Sequence[DeviceInfo]:
        return self._devices

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        smi = self._smi
        assert smi is not None
        try:
            return fn(*args)
        except smi.AmdSmiException as e:
            if _STATUS_KINDS.get(_status(e) or -1) == "not_supported":
                return None
            raise

    def _discover(self, smi: ModuleType, handles: list[Any]) -> None:
        devices = []
        for index, h in enumerate(handles):
            uuid = str(smi.amdsmi_get_gpu_device_uuid(h))
            asic = self._optional(smi.amdsmi_get_gpu_asic_info, h) or {}
            vram = self._optional(smi.amdsmi_get_gpu_vram_usage, h) or {}
            cap = self._optional(smi.amdsmi_get_power_cap_info, h) or {}
            total = _number(vram.get("vram_total"))
            cap_uw = _number(cap.get("power_cap"))
            dra_name = self._dra_name(smi, h)
            labels = self._vendor_labels(smi, h, str(asic.get("market_name") or "AMD GPU"))
            self._handles[uuid] = h
            devices.append(
                DeviceInfo(
                    index=index,
                    uuid=uuid,
                    name=str(asic.get("market_name") or "AMD GPU"),
                    pci_bus_id=str(smi.amdsmi_get_gpu_device_bdf(h)),
                    memory_total_bytes=None if total is None else int(total * MB),
                    power_limit_watts=None if cap_uw is None else cap_uw / 1e6,
                    vendor=Vendor.AMD,
                    dra_name=dra_name,
                    vendor_labels=labels,
                )
            )
        self._devices = tuple(devices)

    def _call(self, smi: ModuleType, name: str, h: Any) -> Any:
        """``smi.<name>(h)`` for a label, best effort: ``None`` where this AMD SMI lacks the call, or the call
        fails in any way (some need privileges the agent lacks): a label is never worth a GPU's series."""
        fn = getattr(smi, name, None)
        if fn is None:
            return None
        try:
            return fn(h)
        except (smi.AmdSmiException, ValueError, TypeError, KeyError) as e:
            log.debug("AMD SMI %s failed (%s): the exporter's default instead", name, e)
            return None

    def _vendor_labels(self, smi: ModuleType, h: Any, market_name: str) -> tuple[tuple[str, str], ...]:
        board = self._call(smi, "amdsmi_get_gpu_board_info", h) or {}
        compute = _text(self._call(smi, "amdsmi_get_gpu_compute_partition", h)).lower()
        memory = _text(self._call(smi, "amdsmi_get_gpu_memory_partition", h)).lower()
        mode = self._call(smi, "amdsmi_get_gpu_virtualization_mode", h) or {}
        raw_mode = _number(mode.get("mode")) if isinstance(mode, dict) else None
        return (
            ("card_model", _text(board.get("model_number")) or market_name),
            ("serial_number", _text(board.get("product_serial"))),
            ("gpu_partition_id", self._partition_id(smi, h)),
            ("gpu_compute_partition_type", compute if compute in _COMPUTE_PARTITIONS else "none"),
            ("gpu_memory_partition_type", memory if memory in _MEMORY_PARTITIONS else "none"),
            ("deployment_mode", _DEPLOYMENT_MODES.get(int(raw_mode or 0), "baremetal")),
        )

    def _partition_id(self, smi: ModuleType, h: Any) -> str:
        profile = self._call(smi, "amdsmi_get_gpu_accelerator_partition_profile", h)
        ids = profile.get("partition_id") if isinstance(profile, dict) else None
        first = _number(ids[0]) if isinstance(ids, list | tuple) and ids else None
        if first is None:
            kfd = self._call(smi, "amdsmi_get_gpu_kfd_info", h)
            first = _number(kfd.get("current_partition_id")) if isinstance(kfd, dict) else None
        return "NA" if first is None else str(int(first))

    def _dra_name(self, smi: ModuleType, h: Any) -> str | None:
        """``gpu-<card>-<render>``, the name AMD's DRA driver gives this GPU or partition (its exporter's DRA
        key), from the DRM minors ``amdsmi_get_gpu_enumeration_info`` reports (ROCm 6.4+; before, none). A
        minor the library does not know (render 0 or UINT32_MAX, as it reports it) gives none."""
        info = self._call(smi, "amdsmi_get_gpu_enumeration_info", h)
        if not isinstance(info, dict):
            return None
        card, render = _number(info.get("drm_card")), _number(info.get("drm_render"))
        if card is None or render is None or render == 0 or _UINT32_MAX in (card, render):
            return None
        return f"gpu-{int(card)}-{int(render)}"

    def sample(self, device: DeviceInfo) -> GpuSample:
        smi = self._smi
        if smi is None:
            raise DeviceError(device.uuid, "driver", "AMD SMI is not open")
        h = self._handles.get(device.uuid)
        if h is None:
            raise DeviceError(device.uuid, "lost", "no such device in this AMD SMI session")
        try:
            return self._read(smi, device, h)
        except smi.AmdSmiException as e:
            raise _device_error(device.uuid, e) from e

    def _read(self, smi: ModuleType, device: DeviceInfo, h: Any) -> GpuSample:
        opt = self._optional
        now = self._clock()
        activity: Mapping[str, Any] = opt(smi.amdsmi_get_gpu_activity, h) or {}
        vram: Mapping[str, Any] = opt(smi.amdsmi_get_gpu_vram_usage, h) or {}
        power: Mapping[str, Any] = opt(smi.amdsmi_get_power_info, h) or {}
        sensors: dict[str, float | None] = {}
        for sensor in ("HOTSPOT", "EDGE"):
            kind = getattr(smi.AmdSmiTemperatureType, sensor, None)
            value = None
            if kind is not None:
                value = _number(opt(smi.amdsmi_get_temp_metric, h, kind, smi.AmdSmiTemperatureMetric.CURRENT))
            if value is not None and value > 1000:
                value /= 1000.0  # millidegrees on some releases
            sensors[sensor] = value
        junction, edge = sensors["HOTSPOT"], sensors["EDGE"]
        temp = junction if junction is not None else edge
        clock_info: Mapping[str, Any] = opt(smi.amdsmi_get_clock_info, h, smi.AmdSmiClkType.GFX) or {}
        watts = None
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            watts = _number(power.get(key))
            if watts is not None:
                break
        used, total = _number(vram.get("vram_used")), _number(vram.get("vram_total"))
        limit = _number(power.get("power_limit"))
        return GpuSample(
            uuid=device.uuid,
            timestamp=now,
            gpu_utilization=_number(activity.get("gfx_activity")),
            memory_utilization=_number(activity.get("umc_activity")),
            memory_used_bytes=None if used is None else int(used * MB),
            memory_total_bytes=None if total is None else int(total * MB),
            temperature_celsius=temp,
            junction_temperature_celsius=junction,
            edge_temperature_celsius=edge,
            package_power_watts=_number(power.get("current_socket_power")),
            power_watts=watts,
            power_limit_watts=(limit if limit is not None else device.power_limit_watts),
            sm_clock_mhz=_number(clock_info.get("clk")),
            processes=self._processes(smi, h),
        )

    def _processes(self, smi: ModuleType, h: Any) -> tuple[ProcessSample, ...]:
        procs = self._optional(smi.amdsmi_get_gpu_process_list, h) or []
        out = []
        for p in procs:
            if not isinstance(p, Mapping) or not isinstance(p.get("pid"), int):
                continue  # older releases return bare handles without details
            usage = p.get("memory_usage") or {}
            vram = _number(usage.get("vram_mem")) if isinstance(usage, Mapping) else None
            out.append(ProcessSample(int(p["pid"]), None if vram is None else int(vram), None))
        return tuple(out)
