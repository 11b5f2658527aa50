"""This node's DRA devices, kept current by list+watch of its ResourceSlices (``resource.k8s.io``).

With Dynamic Resource Allocation a GPU is not a device-plugin id but a *device* of a DRA driver: the kubelet's
PodResources API names it by driver, pool and device name (``gpu.nvidia.com``, ``node-1``, ``gpu-0``), which
says nothing about which GPU it is. The driver publishes what it is in a ResourceSlice of the node, as device
attributes (dcgm-exporter looks them up the same way):

=================  =========================================================================================
driver             attributes that name the GPU
=================  =========================================================================================
``gpu.nvidia.com``  ``uuid`` (``GPU-…``, or ``MIG-…`` for a MIG device), ``pcieBusID``
``gpu.amd.com``     ``resource.kubernetes.io/pciBusID`` (a partition carries its parent's), ``pciAddr``
=================  =========================================================================================

``devices`` maps ``dra_device_key(driver, pool, device)`` to those identities, UUID first; the attribution
matches them to the GPUs the agent reads. The API version is the newest this API server serves of ``v1``
(Kubernetes 1.34+), ``v1beta2`` and ``v1beta1`` (where a device's attributes sit under ``basic``). A cluster
without ``resource.k8s.io`` has no DRA: the watcher says so once and ends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
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
        if domain not in ("", driver, _STANDARD) or short not in _IDENTITY_ATTRIBUTES:
            continue
        text = _attribute_value(value)
        if text:
            found.setdefault(short, text.strip())
    return tuple(dict.fromkeys(found[a] for a in _IDENTITY_ATTRIBUTES if a in found))


def _slice_devices(obj: Json) -> tuple[str, dict[str, tuple[str, ...]]] | None:
    """A ResourceSlice → (its name, {device key: identities}); ``None`` if it is not one."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    name, driver = meta.get("name"), spec.get("driver")
    pool = (spec.get("pool") or {}).get("name") if isinstance(spec.get("pool"), dict) else None
    if not isinstance(name, str) or not isinstance(driver, str) or not isinstance(pool, str):
        return None
    devices: dict[str, tuple[str, ...]] = {}
    for device in spec.get("devices") or []:
        if isinstance(device, dict) and isinstance(device.get("name"), str):
            devices[dra_device_key(driver, pool, device["name"])] = device_identities(device, driver)
    return name, devices


class _NoDra(Exception):
    """The API server serves no ResourceSlices gpuscale reads: nothing to watch."""


class NodeResourceSliceWatcher(NodeListWatch):
    """List+watch of the ResourceSlices of ``node_name`` (``spec.nodeName``). ``devices`` is empty until
    they are read."""

    stale_consequence = "GPUs allocated through DRA may not be attributed to their pods"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group_version: str | None = None
        self._devices: DeviceTable = MappingProxyType({})
        self._slices: dict[str, dict[str, tuple[str, ...]]] = {}  # slice name → its devices

    @property
    def devices(self) -> DeviceTable:
        """DRA device key (``dra_device_key``) → what names its GPU (``device_identities``)."""
        return self._devices

    def describe(self) -> str:
        return f"ResourceSlices of node {self.node_name}"

    async def run(self) -> None:
        try:
            await super().run()
        except _NoDra:
            return

    async def _list(self) -> None:
        if self.group_version is None:  # first: which version of the group this API server serves
            version = await self._served_version()
            self.group_version = f"{GROUP}/{version}"
            self.path = f"/apis/{GROUP}/{version}/resourceslices"
        await super()._list()

    async def _served_version(self) -> str:
        """The newest of ``VERSIONS`` the API server serves; ``_NoDra`` (said once) when it serves none.
        Other failures raise ``KubeApiError``: the loop retries them like the watch's own."""
        try:
            group = await get_json(self.api, f"/apis/{GROUP}", timeout=self.settings.request_timeout_s)
        except KubeApiError as e:
            if e.status == 404:
                log.info("%s is not served: no DRA in this cluster, DRA devices are not looked up", GROUP)
                raise _NoDra from e
            raise
        served = {str(v.get("version")) for v in group.get("versions") or [] if isinstance(v, dict)}
        for version in VERSIONS:
            if version in served:
                return version
        log.warning(
            "%s serves %s, none of %s: DRA devices are not looked up",
            GROUP,
            ", ".join(sorted(served)) or "no version",
            ", ".join(VERSIONS),
        )
        raise _NoDra

    def _selector(self) -> list[tuple[str, str]]:
        return [("fieldSelector", f"spec.nodeName={self.node_name}")]

    def _mine(self, obj: Json) -> bool:
        return (obj.get("spec") or {}).get("nodeName") == self.node_name

    def _publish(self) -> bool:
        merged = {key: ids for devices in self._slices.values() for key, ids in devices.items()}
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
