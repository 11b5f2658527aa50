"""This node's DRA devices, kept current by list+watch of its ResourceSlices (``resource.k8s.io``).

With Dynamic Resource Allocation a GPU is not a device-plugin id but a *device* of a DRA driver: the kubelet's
PodResources API names it by driver, pool and device name (``gpu.nvidia.com``, ``node-1``, ``gpu-0``), which
says nothing about which GPU it is. The driver publishes what it is in a ResourceSlice of the node, as device
attributes (dcgm-exporter looks them up the same way):

==================  ========================================================================================
driver              attributes that name the GPU
==================  ========================================================================================
``gpu.nvidia.com``  ``uuid`` (``GPU-…``, or ``MIG-…`` for a MIG device), ``pcieBusID``
``gpu.amd.com``     ``resource.kubernetes.io/pciBusID``, ``pciAddr``
==================  ========================================================================================

A part of a GPU (an NVIDIA MIG device, ``type: mig`` or with a ``parentUUID``; an AMD partition, ``type:
amdgpu-partition``) is named by its ``uuid`` alone: its bus id is its parent's, and would name the whole GPU.
NVIDIA's dynamic MIG devices have no ``uuid`` until prepared, so nothing names them here; AMD's devices are
matched by their name first (``agent.attribution``), which their DRM minors give.

``devices`` maps ``dra_device_key(driver, pool, device)`` to those identities, UUID first, from the slices of
each pool's newest generation (older ones are being replaced); the attribution matches them to the GPUs the
agent reads. The API version is the newest this API server serves of ``v1`` (Kubernetes 1.34+), ``v1beta2``
and ``v1beta1`` (where a device's attributes sit under ``basic``), found again when that version goes away.
Where ``resource.k8s.io`` is not served (``note`` says so), the watcher looks again every few minutes: DRA may
be turned on later.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..model import dra_device_key
from ._http import Json, get_json
from .errors import KubeApiError
from .informer import NodeListWatch

__all__ = ["GROUP", "NodeResourceSliceWatcher", "device_identities"]

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # newest first
_STANDARD = "resource.kubernetes.io"
NOT_SERVED_RETRY_S = 300.0
_PARTS = ("mig", "amdgpu-partition")  # ``type`` of a device that is a part of a GPU
# attribute names (without their domain) that name a GPU, in the order they are tried
_IDENTITY_ATTRIBUTES = ("uuid", "pciBusID", "pcieBusID", "pciAddr")

DeviceTable = Mapping[str, tuple[str, ...]]


def _attribute_value(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    for kind in ("string", "version", "int"):
        if kind in value and value[kind] is not None and not isinstance(value[kind], bool):
            return str(value[kind])
    return None


def device_identities(device: Json, driver: str) -> tuple[str, ...]:
    """The attributes of a ResourceSlice ``device`` that name a GPU, in ``_IDENTITY_ATTRIBUTES`` order.
    A name without a domain is in the driver's own; ``resource.kubernetes.io`` is the standard domain."""
    attributes = device.get("attributes")
    if attributes is None and isinstance(device.get("basic"), dict):  # v1beta1
        attributes = device["basic"].get("attributes")
    if not isinstance(attributes, dict):
        return ()
    found: dict[str, str] = {}
    for name, value in attributes.items():
        domain, _, short = str(name).rpartition("/")
        if domain not in ("", driver, _STANDARD):
            continue
        text = _attribute_value(value)
        if text:
            found.setdefault(short, text.strip())
    if found.get("type") in _PARTS or "parentUUID" in found:  # a bus id would name the whole GPU
        return (found["uuid"],) if "uuid" in found else ()
    return tuple(dict.fromkeys(found[a] for a in _IDENTITY_ATTRIBUTES if a in found))


@dataclass(frozen=True, slots=True)
class _Slice:
    driver: str
    pool: str
    generation: int
    devices: dict[str, tuple[str, ...]]


def _slice_devices(obj: Json) -> tuple[str, _Slice] | None:
    """A ResourceSlice → (its name, what it says); ``None`` if it is not one."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    name, driver = meta.get("name"), spec.get("driver")
    raw_pool = spec.get("pool")
    pool: Json = raw_pool if isinstance(raw_pool, dict) else {}
    pool_name, generation = pool.get("name"), pool.get("generation", 0)
    if not isinstance(name, str) or not isinstance(driver, str) or not isinstance(pool_name, str):
        return None
    devices: dict[str, tuple[str, ...]] = {}
    for device in spec.get("devices") or []:
        if isinstance(device, dict) and isinstance(device.get("name"), str):
            devices[dra_device_key(driver, pool_name, device["name"])] = device_identities(device, driver)
    gen = generation if isinstance(generation, int) and not isinstance(generation, bool) else 0
    return name, _Slice(driver, pool_name, gen, devices)


class _NoDra(Exception):
    """The API server serves no ResourceSlices gpuscale reads: nothing to watch (for now)."""


class NodeResourceSliceWatcher(NodeListWatch):
    """List+watch of the ResourceSlices of ``node_name`` (``spec.nodeName``). ``devices`` is empty until
    they are read."""

    stale_consequence = "GPUs allocated through DRA may not be attributed to their pods"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group_version: str | None = None
        self.note: str | None = None  # why there are no devices to look up: the group is not served
        self._devices: DeviceTable = MappingProxyType({})
        self._slices: dict[str, _Slice] = {}  # by slice name

    @property
    def devices(self) -> DeviceTable:
        """DRA device key (``dra_device_key``) → what names its GPU (``device_identities``)."""
        return self._devices

    def describe(self) -> str:
        return f"ResourceSlices of node {self.node_name}"

    async def run(self) -> None:
        while True:
            try:
                await super().run()
            except _NoDra:
                await self._sleep(NOT_SERVED_RETRY_S)

    async def _list(self) -> None:
        if self.group_version is None:  # first: which version of the group this API server serves
            version = await self._served_version()
            self.group_version = f"{GROUP}/{version}"
            self.path = f"/apis/{GROUP}/{version}/resourceslices"
        try:
            await super()._list()
        except KubeApiError as e:
            self._forget_version_on_404(e)
            raise

    async def _watch(self) -> int:
        try:
            return await super()._watch()
        except KubeApiError as e:
            self._forget_version_on_404(e)
            raise

    def _forget_version_on_404(self, e: KubeApiError) -> None:
        """The version in use is no longer served (an upgrade removed it): find the version again."""
        if e.status == 404:
            self.group_version, self.resource_version = None, None

    async def _served_version(self) -> str:
        """The newest of ``VERSIONS`` the API server serves; ``_NoDra`` when it serves none (said once, kept
        in ``note``). Other failures raise ``KubeApiError``: the loop retries them like the watch's own."""
        try:
            group = await get_json(self.api, f"/apis/{GROUP}", timeout=self.settings.request_timeout_s)
        except KubeApiError as e:
            if e.status == 404:
                self._not_served(f"the API server does not serve {GROUP} (no DRA in this cluster)")
                raise _NoDra from e
            raise
        served = {str(v.get("version")) for v in group.get("versions") or [] if isinstance(v, dict)}
        for version in VERSIONS:
            if version in served:
                if self.note is not None:
                    log.info("%s is served now (%s): looking up DRA devices", GROUP, version)
                self.note = None
                return version
        self._not_served(
            f"the API server serves {GROUP} in {', '.join(sorted(served)) or 'no version'}, "
            f"none of {', '.join(VERSIONS)}"
        )
        raise _NoDra

    def _not_served(self, note: str) -> None:
        if note != self.note:
            log.info("%s: DRA devices are not looked up; looking again every %.0fs", note, NOT_SERVED_RETRY_S)
        self.note = note
        self._slices = {}
        if self._publish():
            self._bump()

    def _selector(self) -> list[tuple[str, str]]:
        return [("fieldSelector", f"spec.nodeName={self.node_name}")]

    def _mine(self, obj: Json) -> bool:
        return (obj.get("spec") or {}).get("nodeName") == self.node_name

    def _publish(self) -> bool:
        newest: dict[tuple[str, str], int] = {}
        for sl in self._slices.values():
            key = (sl.driver, sl.pool)
            newest[key] = max(newest.get(key, sl.generation), sl.generation)
        merged = {
            key: ids
            for sl in self._slices.values()
            if sl.generation == newest[(sl.driver, sl.pool)]
            for key, ids in sl.devices.items()
        }
        if merged == self._devices:
            return False
        self._devices = MappingProxyType(merged)
        return True

    def _replace(self, items: list[Json]) -> bool:
        self._slices = {}
        for obj in items:
            parsed = _slice_devices(obj) if self._mine(obj) else None
            if parsed is not None:
                self._slices[parsed[0]] = parsed[1]
        return self._publish()

    def _upsert(self, obj: Json) -> bool:
        parsed = _slice_devices(obj)
        if parsed is None:
            return False
        if not self._mine(obj):  # moved off this node (never in practice): forget it
            self._slices.pop(parsed[0], None)
        else:
            self._slices[parsed[0]] = parsed[1]
        return self._publish()

    def _delete(self, obj: Json) -> bool:
        name = (obj.get("metadata") or {}).get("name")
        if self._slices.pop(str(name), None) is None:
            return False
        return self._publish()
