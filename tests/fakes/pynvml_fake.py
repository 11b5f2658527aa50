"""A stand-in for NVIDIA's ``pynvml`` (nvidia-ml-py) for tests on machines without a GPU.

It follows the real module's API as the NVML backend uses it: the same function names, return objects with
the same attribute names and units (bytes, mW, MHz, µs timestamps), and ``NVMLError`` carrying ``.value``
with NVML's return codes. Test-only; never in the production backend table.

GPM (Hopper's activity counters) uses the real binding's ctypes structures, field for field as nvidia-ml-py
13 declares them (``c_nvmlGpmMetricsGet_t`` with its 477-entry ``metrics`` array; a sample is a pointer to an
opaque struct, here carrying an id): the backend's use of them is type-checked by ctypes as it would be on a
GPU. A device's GPM values are what its ``gpm`` dict holds when the second sample of an interval is taken.
MIG instances are ``FakeGpu`` objects in their parent's ``mig_devices``.
"""

from __future__ import annotations

import ctypes
import itertools
import types
from dataclasses import dataclass, field
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_DEVICE_MIG_ENABLE = 1
NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1
NVML_GPM_METRIC_GRAPHICS_UTIL = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60
NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_GPM_METRIC_MAX = 477
nvmlMemory_v2 = 0x02000028


class struct_c_nvmlGpmSample_t(ctypes.Structure):  # opaque in NVML; an id here
    _fields_ = [("fake_id", ctypes.c_uint)]


c_nvmlGpmSample_t = ctypes.POINTER(struct_c_nvmlGpmSample_t)


class c_metricInfo_t(ctypes.Structure):
    _fields_ = [("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class c_nvmlGpmMetric_t(ctypes.Structure):
    _fields_ = [
        ("metricId", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", ctypes.c_double),
        ("metricInfo", c_metricInfo_t),
    ]


class c_nvmlGpmMetricsGet_t(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numMetrics", ctypes.c_uint),
        ("sample1", c_nvmlGpmSample_t),
        ("sample2", c_nvmlGpmSample_t),
        ("metrics", c_nvmlGpmMetric_t * NVML_GPM_METRIC_MAX),
    ]


class c_nvmlValue_t(ctypes.Union):
    _fields_ = [
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
        ("usVal", ctypes.c_ushort),
    ]


class c_nvmlFieldValue_t(ctypes.Structure):
    _fields_ = [
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),
        ("latencyUsec", ctypes.c_int64),
        ("valueType", ctypes.c_uint32),
        ("nvmlReturn", ctypes.c_uint32),
        ("value", c_nvmlValue_t),
    ]


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            2: "Invalid Argument",
            3: "Not Supported",
            6: "Not Found",
            9: "Driver Not Loaded",
            12: "NVML Shared Library Not Found",
            13: "Function Not Found",
            15: "GPU is lost",
            10: "Timeout",
        }.get(self.value, f"Unknown Error {self.value}")


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    bus_id: str = "00000000:19:00.0"
    total: int = 143771 * 1024 * 1024
    used: int = 4 * 1024**3  # as v2 reports it; v1 adds ``reserved``
    reserved: int = 512 * 1024**2
    util_gpu: int = 37
    util_mem: int = 12
    temp: int = 41
    power_mw: int = 123_456
    limit_mw: int = 700_000
    sm_clock: int = 1980
    mem_clock: int = 2619
    energy_mj: int = 123_456_789
    encoder: int = 5
    decoder: int = 7
    pcie_replays: int = 3
    memory_temp: int | None = 48  # HBM °C (NVML_FI_DEV_MEMORY_TEMP); None: the part has no such sensor
    remapped_rows: tuple[int, int, int, int] = (2, 1, 0, 0)  # correctable, uncorrectable, pending, failure
    mig: tuple[int, int] | None = (0, 0)  # None: not supported
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    proc_util: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, smUtil, timeStamp µs)
    unsupported: set[str] = field(default_factory=set)  # function names raising NOT_SUPPORTED
    fail: int | None = None  # an NVML error code every read raises
    gpm: dict[int, float] | None = None  # GPM metric id → value over the next interval; None: no GPM
    mig_devices: list[FakeGpu] = field(default_factory=list)  # with mig=(1, 1)
    gpu_instance_id: int = 0  # for a MIG instance
    slices: int = 0


def mig_instance(
    uuid: str,
    gi: int,
    slices: int,
    memory_gb: float,
    gpm: dict[int, float] | None = None,
    *,
    profile: str | None = None,
    parent_name: str = "NVIDIA H200",
) -> FakeGpu:
    """A MIG instance as NVML shows it: named "<parent> MIG <profile>", its memory a little under the profile's
    nominal size, and no utilization, temperature or power of its own."""
    return FakeGpu(
        uuid,
        name=f"{parent_name} MIG {profile or f'{slices}g.{round(memory_gb)}gb'}",
        total=int(memory_gb * 1024**3),
        used=1024**3,
        memory_temp=None,
        gpu_instance_id=gi,
        slices=slices,
        gpm=gpm,
        unsupported={
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetEnforcedPowerLimit",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetProcessUtilization",
        },
    )


def make_module(gpus: list[FakeGpu], *, init_error: int | None = None) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    for k, v in list(globals().items()):
        if k.startswith("NVML_"):
            setattr(m, k, v)
    m.nvmlMemory_v2 = nvmlMemory_v2  # type: ignore[attr-defined]
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
        def call(h: FakeGpu, *args: Any, **kwargs: Any) -> Any:
            return getter(check(h, name), *args, **kwargs)

        setattr(m, name, call)

    m.nvmlInit = nvmlInit  # type: ignore[attr-defined]
    m.nvmlShutdown = nvmlShutdown  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByUUID = lambda u: next(g for g in gpus if g.uuid == u)  # type: ignore[attr-defined]
    ns = types.SimpleNamespace
    fn("nvmlDeviceGetUUID", lambda g: g.uuid)
    fn("nvmlDeviceGetName", lambda g: g.name)
    fn("nvmlDeviceGetPciInfo", lambda g: ns(busId=g.bus_id.encode()))

    def memory(g: FakeGpu, version: int | None = None) -> Any:
        # v1 counts the memory the driver reserves as used; v2 reports it apart (total = free + used + reserved)
        if version is None:
            return ns(total=g.total, used=g.used + g.reserved, free=g.total - g.used - g.reserved)
        if version != nvmlMemory_v2 or "nvmlDeviceGetMemoryInfo_v2" in g.unsupported:
            raise NVMLError(
                NVML_ERROR_FUNCTION_NOT_FOUND if version == nvmlMemory_v2 else NVML_ERROR_INVALID_ARGUMENT
            )
        return ns(
            version=version,
            total=g.total,
            reserved=g.reserved,
            used=g.used,
            free=g.total - g.used - g.reserved,
        )

    fn("nvmlDeviceGetMemoryInfo", memory)
    fn("nvmlDeviceGetEnforcedPowerLimit", lambda g: g.limit_mw)
    fn("nvmlDeviceGetMigMode", lambda g: _mig(g))
    fn("nvmlDeviceGetUtilizationRates", lambda g: ns(gpu=g.util_gpu, memory=g.util_mem))
    fn("nvmlDeviceGetTemperature", lambda g, sensor: g.temp)
    fn("nvmlDeviceGetPowerUsage", lambda g: g.power_mw)
    fn("nvmlDeviceGetClockInfo", lambda g, clock: g.mem_clock if clock == NVML_CLOCK_MEM else g.sm_clock)
    fn("nvmlDeviceGetTotalEnergyConsumption", lambda g: g.energy_mj)
    fn("nvmlDeviceGetEncoderUtilization", lambda g: [g.encoder, 167_000])
    fn("nvmlDeviceGetDecoderUtilization", lambda g: [g.decoder, 167_000])
    fn("nvmlDeviceGetPcieReplayCounter", lambda g: g.pcie_replays)
    fn("nvmlDeviceGetRemappedRows", lambda g: g.remapped_rows)

    def field_values(g: FakeGpu, field_ids: list[int]) -> Any:
        # as the binding: one c_nvmlFieldValue_t per id, each with its own return code
        values = (c_nvmlFieldValue_t * len(field_ids))()
        for v, fid in zip(values, field_ids, strict=True):
            v.fieldId = fid
            if fid == NVML_FI_DEV_MEMORY_TEMP and g.memory_temp is not None:
                v.valueType, v.value.uiVal = NVML_VALUE_TYPE_UNSIGNED_INT, g.memory_temp
            else:
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        return values

    fn("nvmlDeviceGetFieldValues", field_values)
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"  # type: ignore[attr-defined]
    fn(
        "nvmlDeviceGetComputeRunningProcesses",
        lambda g: [
            ns(pid=p, usedGpuMemory=u, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for p, u in g.processes
        ],
    )
    fn("nvmlDeviceGetProcessUtilization", lambda g, since: _proc_util(g, since))
    # MIG
    fn("nvmlDeviceGetMaxMigDeviceCount", lambda g: 7)
    fn("nvmlDeviceGetMigDeviceHandleByIndex", _mig_handle)
    fn("nvmlDeviceGetAttributes", lambda g: ns(gpuInstanceSliceCount=g.slices, memorySizeMB=g.total // 2**20))
    fn("nvmlDeviceGetGpuInstanceId", lambda g: g.gpu_instance_id)
    fn("nvmlDeviceGetComputeInstanceId", lambda g: 0)
    _add_gpm(m, state, check)
    _add_events(m, state, gpus)
    return m


def _add_events(m: types.ModuleType, state: dict[str, Any], gpus: list[FakeGpu]) -> None:
    """NVML's event sets for XID errors: register GPUs, wait (blocking up to the timeout, NVML_ERROR_TIMEOUT
    when nothing came), free. ``raise_xid(gpu, xid)`` is the driver reporting one."""
    import queue

    events: queue.Queue[Any] = queue.Queue()
    registered: set[str] = set()
    state["event_sets"] = {"created": 0, "freed": 0}
    m.nvmlEventTypeXidCriticalError = 0x8  # type: ignore[attr-defined]

    def create() -> object:
        state["event_sets"]["created"] += 1
        return object()

    def register(g: FakeGpu, types_: int, event_set: object) -> None:
        if "nvmlDeviceRegisterEvents" in g.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        registered.add(g.uuid)

    def wait(event_set: object, timeout_ms: int) -> Any:
        try:
            return events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(NVML_ERROR_TIMEOUT) from None

    def free(event_set: object) -> None:
        state["event_sets"]["freed"] += 1

    def raise_xid(g: FakeGpu, xid: int) -> None:
        if g.uuid in registered:
            events.put(
                types.SimpleNamespace(
                    device=g, eventType=0x8, eventData=xid, gpuInstanceId=0, computeInstanceId=0
                )
            )

    m.nvmlEventSetCreate = create  # type: ignore[attr-defined]
    m.nvmlDeviceRegisterEvents = register  # type: ignore[attr-defined]
    m.nvmlEventSetWait_v2 = wait  # type: ignore[attr-defined]
    m.nvmlEventSetFree = free  # type: ignore[attr-defined]
    m.raise_xid = raise_xid  # type: ignore[attr-defined]


def _mig_handle(g: FakeGpu, index: int) -> FakeGpu:
    if index >= len(g.mig_devices):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return g.mig_devices[index]


def _add_gpm(m: types.ModuleType, state: dict[str, Any], check: Any) -> None:
    """GPM as NVML has it: samples allocated and freed by the caller, taken of a GPU or of one GPU instance
    of it, and metrics computed between two samples of the same device, the first taken before the second."""
    ids = itertools.count(1)
    taken: dict[int, tuple[int, int, dict[int, float]]] = {}  # sample id → (when, device id, values)
    clock = itertools.count(1)
    state["gpm_allocated"] = allocated = set()
    state["gpm_freed"] = 0
    for k, v in globals().items():
        if k.startswith(("c_nvmlGpm", "struct_c_nvmlGpm", "c_metricInfo")):
            setattr(m, k, v)

    def support(g: FakeGpu) -> Any:
        check(g, "nvmlGpmQueryDeviceSupport")
        return types.SimpleNamespace(
            version=NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(g.gpm is not None)
        )

    def alloc() -> Any:
        sample = ctypes.pointer(struct_c_nvmlGpmSample_t(next(ids)))
        allocated.add(sample.contents.fake_id)
        return sample

    def free(sample: Any) -> None:
        sid = sample.contents.fake_id
        if sid not in allocated:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)  # a double free, or never allocated
        allocated.discard(sid)
        taken.pop(sid, None)
        state["gpm_freed"] += 1

    def take(target: FakeGpu, sample: Any) -> None:
        if sample.contents.fake_id not in allocated:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if target.gpm is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        taken[sample.contents.fake_id] = (next(clock), id(target), dict(target.gpm))
        state["calls"].append("gpm_sample")

    def sample_get(g: FakeGpu, sample: Any) -> Any:
        check(g, "nvmlGpmSampleGet")
        if g.mig is not None and g.mig[0] == NVML_DEVICE_MIG_ENABLE:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # a GPU in MIG mode: per GPU instance only
        take(g, sample)
        return sample

    def mig_sample_get(g: FakeGpu, gpu_instance_id: int, sample: Any) -> Any:
        check(g, "nvmlGpmMigSampleGet")
        instance = next((i for i in g.mig_devices if i.gpu_instance_id == gpu_instance_id), None)
        if instance is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        take(instance, sample)
        return sample

    def metrics_get(get: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        if not isinstance(get, c_nvmlGpmMetricsGet_t) or get.version != NVML_GPM_METRICS_GET_VERSION:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        first = taken.get(get.sample1.contents.fake_id)
        second = taken.get(get.sample2.contents.fake_id)
        if first is None or second is None or first[1] != second[1] or first[0] >= second[0]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)  # not two samples of one device, in time order
        values = second[2]
        for i in range(get.numMetrics):
            metric = get.metrics[i]
            if metric.metricId in values:
                metric.nvmlReturn, metric.value = NVML_SUCCESS, values[metric.metricId]
            else:
                metric.nvmlReturn, metric.value = NVML_ERROR_NOT_SUPPORTED, 0.0
        state["calls"].append("nvmlGpmMetricsGet")
        return get

    m.nvmlGpmQueryDeviceSupport = support  # type: ignore[attr-defined]
    m.nvmlGpmSampleAlloc = alloc  # type: ignore[attr-defined]
    m.nvmlGpmSampleFree = free  # type: ignore[attr-defined]
    m.nvmlGpmSampleGet = sample_get  # type: ignore[attr-defined]
    m.nvmlGpmMigSampleGet = mig_sample_get  # type: ignore[attr-defined]
    m.nvmlGpmMetricsGet = metrics_get  # type: ignore[attr-defined]


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
