"""Which containers hold which GPU: the device ids a device plugin reports, matched to discovered devices.

Pure: data in, data out. The forms understood (the same as dcgm-exporter's PodMapper and AMD's exporter):

=============================  ==========================================================================
device id                      device
=============================  ==========================================================================
``GPU-<uuid>``                 the GPU with that UUID
``GPU-<uuid>::<n>``            the same GPU (a time-slicing / MPS replica; several containers share it)
``MIG-<uuid>[::<n>]``          the MIG device with that UUID (``::n``: EKS-style suffix)
``MIG-GPU-<uuid>/<gi>/<ci>``   the MIG device of parent ``GPU-<uuid>``, GPU instance ``gi`` (drivers < R470)
``nvidia<N>``                  the GPU with index N (GKE), not one of its MIG devices
``nvidia<N>/vgpu<K>``          the GPU with index N (GKE GPU sharing)
``nvidia<N>/gi<M>[/vgpu<K>]``  the MIG device(s) of GPU N with GPU instance M (GKE MIG)
anything else                  a device whose UUID or PCI bus id equals it, ignoring case and a missing or
                               differently padded PCI domain (``0000:c1:00.0``, NVML's ``00000000:C1:00.0``)
=============================  ==========================================================================

A DRA device (``Assignment.dra``) is named by driver, pool and device. AMD's ``gpu.amd.com`` names a GPU or
partition ``gpu-<card>-<render>`` after its DRM minors, which the backend knows (``DeviceInfo.dra_name``;
AMD's exporter matches the same way). Otherwise the node's ResourceSlices say which GPU it is
(``kube.resourceslices``: its ``uuid``, else its PCI bus id), and that id is matched as above. The
attributed assignment carries the id that matched as its ``device_id``. A bus id that several devices share
(the partitions of one AMD GPU) names none of them: better unattributed than given to the wrong pod.

Ids that match no device are returned in ``Attribution.unmatched``, DRA devices that no ResourceSlice
describes in ``Attribution.undescribed``, for the caller to log (once).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..model import Assignment, DeviceInfo

__all__ = ["Attribution", "attribute", "match_assignments", "normalize_pci_bus_id"]

_LEGACY_MIG = re.compile(r"MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)")
_GKE = re.compile(r"nvidia(\d+)(?:/gi(\d+))?(?:/vgpu(\d+))?")
_AMD_DRA = "gpu.amd.com"
_PCI = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")


@dataclass(frozen=True, slots=True)
class Attribution:
    """``by_device``: device UUID → the assignments holding it, in input order (devices nobody holds: absent).
    ``unmatched``: assignments whose device id names no known device. ``undescribed``: DRA devices that no
    ResourceSlice of the node describes."""

    by_device: Mapping[str, tuple[Assignment, ...]] = field(default_factory=dict)
    unmatched: tuple[Assignment, ...] = ()
    undescribed: tuple[Assignment, ...] = ()


def normalize_pci_bus_id(value: str) -> str | None:
    """``domain:bus:device.function`` in lowercase with a 4-digit domain, or ``None`` if it is not one."""
    m = _PCI.fullmatch(value.strip().lower())
    if m is None:
        return None
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):04x}:{bus}:{dev}.{fn}"


class _Index:
    def __init__(self, devices: Sequence[DeviceInfo]) -> None:
        self.by_uuid: dict[str, str] = {}
        self.by_dra_name: dict[str, str] = {}
        self.by_pci: dict[str, str | None] = {}  # None: several devices have that bus id
        self.gpu_by_index: dict[int, str] = {}
        self.mig_by_index_gi: defaultdict[tuple[int, int], list[DeviceInfo]] = defaultdict(list)
        self.mig_by_parent_gi: defaultdict[tuple[str, int], list[DeviceInfo]] = defaultdict(list)
        for d in devices:
            self.by_uuid[d.uuid.lower()] = d.uuid
            if d.dra_name:
                self.by_dra_name[d.dra_name.lower()] = d.uuid
            if d.is_mig:
                if d.gpu_instance_id is not None:
                    self.mig_by_index_gi[(d.index, d.gpu_instance_id)].append(d)
                    self.mig_by_parent_gi[(str(d.parent_uuid).lower(), d.gpu_instance_id)].append(d)
                continue
            self.gpu_by_index.setdefault(d.index, d.uuid)
            pci = normalize_pci_bus_id(d.pci_bus_id)
            if pci is not None:
                self.by_pci[pci] = d.uuid if pci not in self.by_pci else None

    def resolve(self, device_id: str) -> tuple[str, ...]:
        base = device_id.strip().split("::", 1)[0]
        if (uuid := self.by_uuid.get(base.lower())) is not None:
            return (uuid,)
        if m := _LEGACY_MIG.fullmatch(base):
            parent, gi, ci = m.group(1).lower(), int(m.group(2)), int(m.group(3))
            migs = self.mig_by_parent_gi.get((parent, gi), [])
            exact = [d.uuid for d in migs if d.compute_instance_id == ci]
            return tuple(exact or [d.uuid for d in migs])
        if m := _GKE.fullmatch(base):
            index = int(m.group(1))
            if m.group(2) is not None:
                return tuple(d.uuid for d in self.mig_by_index_gi.get((index, int(m.group(2))), []))
            uuid = self.gpu_by_index.get(index)
            return () if uuid is None else (uuid,)
        pci = normalize_pci_bus_id(base)
        if pci is not None and (uuid := self.by_pci.get(pci)) is not None:
            return (uuid,)
        return ()


def attribute(
    devices: Sequence[DeviceInfo],
    assignments: Iterable[Assignment],
    dra_devices: Mapping[str, Sequence[str]] | None = None,
) -> Attribution:
    """Match every assignment to the devices its id names (usually one; a GKE GPU instance with several
    compute instances names several). ``dra_devices``: what names the GPU of each DRA device of the node,
    by ``DraDevice.key`` (``NodeResourceSliceWatcher.devices``)."""
    index = _Index(devices)
    by_device: defaultdict[str, list[Assignment]] = defaultdict(list)
    unmatched: list[Assignment] = []
    undescribed: list[Assignment] = []
    for a in assignments:
        if a.dra is not None:
            named = index.by_dra_name.get(a.dra.device.lower()) if a.dra.driver.startswith(_AMD_DRA) else None
            identities = (named,) if named is not None else (dra_devices or {}).get(a.dra.key)
            if identities is None:
                undescribed.append(a)
                continue
            targets: tuple[str, ...] = ()
            for identity in identities:
                if targets := index.resolve(identity):
                    a = replace(a, device_id=identity)
                    break
        else:
            targets = index.resolve(a.device_id)
        if not targets:
            unmatched.append(a)
        for uuid in targets:
            by_device[uuid].append(a)
    return Attribution(
        by_device={u: tuple(a) for u, a in by_device.items()},
        unmatched=tuple(unmatched),
        undescribed=tuple(undescribed),
    )


def match_assignments(
    devices: Sequence[DeviceInfo], assignments: Iterable[Assignment]
) -> dict[str, tuple[Assignment, ...]]:
    """Device UUID → the assignments that hold it; ids naming no device are dropped (see ``attribute``)."""
    return dict(attribute(devices, assignments).by_device)
