"""XID errors of NVIDIA GPUs, followed through an NVML event set (dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS``).

A GPU that falls off the bus has no sample after its XID, so the last XID is kept live, by a thread waiting on
NVML events, rather than read with the samples. Part of the NVML backend: the bindings come in as an argument,
never imported here.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ._nvml_codes import ABSENT, TIMEOUT

__all__ = ["XidWatch"]

log = logging.getLogger("gpuscale.backends.nvml")  # the backend's logger: its lines keep one name


class XidWatch:
    """The last XID error each GPU reported (0: none since the agent started), from an NVML event set, on a
    thread of its own: ``nvmlEventSetWait`` blocks, one second at a time so that ``close`` can stop it. The
    set is freed only once the thread has stopped."""

    def __init__(
        self, nvml: ModuleType, handles: Mapping[str, Any], before: Mapping[str, int] | None = None
    ) -> None:
        self._nvml = nvml
        self.last: dict[str, int] = {}
        self._uuids: dict[object, str] = {}  # handle -> uuid: the thread makes no NVML call for a lost GPU
        self._stop = threading.Event()
        self._set = nvml.nvmlEventSetCreate()
        for uuid, h in handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, self._set)
            except nvml.NVMLError:
                continue  # not on this part
            self.last[uuid] = (before or {}).get(uuid, 0)  # a reopen (driver reload) keeps the last XID
            self._uuids[_handle_key(h)] = uuid
        self._thread = threading.Thread(target=self._run, name="nvml-xid-events", daemon=True)
        if self.last:
            self._thread.start()

    def _run(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, 1000)
            except nvml.NVMLError as e:
                code = getattr(e, "value", None)
                if code == TIMEOUT:
                    continue
                if code in ABSENT:
                    return
                self._stop.wait(1.0)  # e.g. the driver going away: the backend reopens, a new watch starts
                continue
            if self._stop.is_set():
                return
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                uuid = self._uuids.get(_handle_key(data.device))
                if uuid is None:
                    continue
                log.warning("GPU %s reported XID %d", uuid, data.eventData)
                self.last[uuid] = int(data.eventData)

    def close(self) -> bool:
        """Stop the thread and free the set; False if the thread did not stop (then NVML must stay up)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.5)
        if self._thread.is_alive():
            return False
        try:
            self._nvml.nvmlEventSetFree(self._set)
        except self._nvml.NVMLError:
            pass
        return True


def _handle_key(h: Any) -> object:
    """A device handle's identity: the address it points to (NVML hands out new pointer objects for the
    same device), or the object itself where it is not a ctypes pointer."""
    try:
        return ctypes.cast(h, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(h)
