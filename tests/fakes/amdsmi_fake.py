"""A stand-in for AMD's ``amdsmi`` Python package, following its documented API (ROCm amdsmi py-interface):
``amdsmi_init``/``amdsmi_shut_down``, ``amdsmi_get_processor_handles``, dict-returning getters with the
documented keys and units ("N/A" for unknown values), ``AmdSmiException`` ⊃ ``AmdSmiLibraryException`` with
``err_code``. Test-only: no AMD GPU is available to the project.
"""

from __future__ import annotations

import enum
import types
from dataclasses import dataclass, field
from typing import Any

AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_DRIVER_NOT_LOADED = 35


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(f"Error code:\n\t{err_code}")
        self.err_code = err_code


class AmdSmiTemperatureType(enum.IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(enum.IntEnum):
    CURRENT = 0


class AmdSmiClkType(enum.IntEnum):
    SYS = 0
    GFX = 0
    MEM = 4


@dataclass
class FakeAmdGpu:
    uuid: str
    bdf: str = "0000:0c:00.0"
    market_name: str = "AMD Instinct MI300X"
    vram_total_mb: int = 196592
    vram_used_mb: int = 1024
    gfx: Any = 55
    umc: Any = 20
    socket_power: Any = 310
    power_cap_uw: int = 750_000_000
    hotspot: Any = 61
    edge: Any = 48
    gfx_clk: int = 2100
    processes: list[dict[str, Any]] = field(default_factory=list)
    fail: int | None = None
    drm_card: int = 1  # amdsmi_get_gpu_enumeration_info (ROCm 6.4+); render 0 or UINT32_MAX: unknown
    drm_render: int = 128
    model_number: str = "102-G30211-00"  # the board's part number ("N/A" when unknown)
    product_serial: str = "692251001124"
    compute_partition: str | None = "SPX"  # None: the GPU cannot be partitioned (NOT_SUPPORTED)
    memory_partition: str | None = "NPS1"
    partition_id: int = 0  # in the accelerator partition profile; 0xFFFFFFFF: none
    virtualization_mode: int = 1  # amdsmi_virtualization_mode_t: 1 BAREMETAL


def make_module(
    gpus: list[FakeAmdGpu], *, init_error: int | None = None, enumeration: bool = True
) -> types.ModuleType:
    """``enumeration=False``: an amdsmi older than ROCm 6.4, without ``amdsmi_get_gpu_enumeration_info``."""
    m = types.ModuleType("amdsmi")
    m.AmdSmiException = AmdSmiException  # type: ignore[attr-defined]
    m.AmdSmiLibraryException = AmdSmiLibraryException  # type: ignore[attr-defined]
    m.AmdSmiTemperatureType = AmdSmiTemperatureType  # type: ignore[attr-defined]
    m.AmdSmiTemperatureMetric = AmdSmiTemperatureMetric  # type: ignore[attr-defined]
    m.AmdSmiClkType = AmdSmiClkType  # type: ignore[attr-defined]

    def init(*_: Any) -> None:
        if init_error is not None:
            raise AmdSmiLibraryException(init_error)

    def h(g: FakeAmdGpu) -> FakeAmdGpu:
        if g.fail is not None:
            raise AmdSmiLibraryException(g.fail)
        return g

    def temp(g: FakeAmdGpu, kind: AmdSmiTemperatureType, metric: Any) -> Any:
        value = {AmdSmiTemperatureType.HOTSPOT: h(g).hotspot, AmdSmiTemperatureType.EDGE: g.edge}[kind]
        if value is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return value

    m.amdsmi_init = init  # type: ignore[attr-defined]
    m.amdsmi_shut_down = lambda: None  # type: ignore[attr-defined]
    m.amdsmi_get_processor_handles = lambda: list(gpus)  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_device_uuid = lambda g: h(g).uuid  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_device_bdf = lambda g: h(g).bdf  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_asic_info = lambda g: {"market_name": h(g).market_name, "vendor_id": "0x1002"}  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_vram_usage = lambda g: {"vram_total": h(g).vram_total_mb, "vram_used": g.vram_used_mb}  # type: ignore[attr-defined]
    m.amdsmi_get_power_cap_info = lambda g: {  # type: ignore[attr-defined]
        "power_cap": h(g).power_cap_uw,
        "default_power_cap": g.power_cap_uw,
    }  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_activity = lambda g: {  # type: ignore[attr-defined]
        "gfx_activity": h(g).gfx,
        "umc_activity": g.umc,
        "mm_activity": "N/A",
    }  # type: ignore[attr-defined]
    m.amdsmi_get_power_info = lambda g: {"socket_power": h(g).socket_power, "gfx_voltage": 800}  # type: ignore[attr-defined]
    m.amdsmi_get_temp_metric = temp  # type: ignore[attr-defined]
    m.amdsmi_get_clock_info = lambda g, t: {"clk": h(g).gfx_clk, "min_clk": 500, "max_clk": 2100}  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_process_list = lambda g: list(h(g).processes)  # type: ignore[attr-defined]

    def partition(value: str | None) -> str:
        if value is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return value

    m.amdsmi_get_gpu_board_info = lambda g: {  # type: ignore[attr-defined]
        "model_number": h(g).model_number,
        "product_serial": g.product_serial,
        "fru_id": "N/A",
        "product_name": g.market_name,
        "manufacturer_name": "AMD",
    }
    m.amdsmi_get_gpu_compute_partition = lambda g: partition(h(g).compute_partition)  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_memory_partition = lambda g: partition(h(g).memory_partition)  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_virtualization_mode = lambda g: {"mode": h(g).virtualization_mode}  # type: ignore[attr-defined]
    m.amdsmi_get_gpu_kfd_info = lambda g: {  # type: ignore[attr-defined]
        "kfd_id": 1,
        "node_id": 2,
        "current_partition_id": h(g).partition_id,
    }  # type: ignore[attr-defined]
    if enumeration:  # the calls of ROCm 6.4 and newer
        m.amdsmi_get_gpu_enumeration_info = lambda g: {  # type: ignore[attr-defined]
            "drm_card": h(g).drm_card,
            "drm_render": g.drm_render,
            "hsa_id": 0,
            "hip_id": 0,
            "hip_uuid": "GPU-" + g.uuid,
        }
        m.amdsmi_get_gpu_accelerator_partition_profile = lambda g: {  # type: ignore[attr-defined]
            "partition_id": [h(g).partition_id, 0xFFFFFFFF],
            "num_partitions": 1,
        }
    return m
