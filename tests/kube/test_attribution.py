"""The device-id forms of NVIDIA's, GKE's and AMD's device plugins, matched to discovered devices."""

from __future__ import annotations

import pytest

from gpuscale.agent.attribution import attribute, match_assignments, normalize_pci_bus_id
from gpuscale.model import Assignment, ContainerRef, DeviceInfo, DraDevice, Vendor

G0 = "GPU-5f3e1c2a-9b8d-4e7f-a6b5-c4d3e2f1a0b9"
G1 = "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
M1A = "MIG-11111111-2222-5333-8444-555555555555"  # GPU 1, GI 1, CI 0
M1B = "MIG-66666666-7777-5888-9999-aaaaaaaaaaaa"  # GPU 1, GI 2, CI 0
M1C = "MIG-bbbbbbbb-cccc-5ddd-8eee-ffffffffffff"  # GPU 1, GI 2, CI 1
AMD0 = "0x9a2b3c4d5e6f7081"


def _gpu(index: int, uuid: str, bus: str, *, mig: bool = False) -> DeviceInfo:
    return DeviceInfo(index, uuid, "NVIDIA H200", bus, 141 << 30, 700.0, mig_enabled=mig)


def _mig(uuid: str, gi: int, ci: int) -> DeviceInfo:
    return DeviceInfo(
        1,
        uuid,
        "NVIDIA H200",
        "00000000:3B:00.0",
        18 << 30,
        None,
        mig_enabled=True,
        parent_uuid=G1,
        mig_profile="1g.18gb",
        gpu_instance_id=gi,
        compute_instance_id=ci,
    )


DEVICES = (
    _gpu(0, G0, "00000000:1A:00.0"),
    _gpu(1, G1, "00000000:3B:00.0", mig=True),
    _mig(M1A, 1, 0),
    _mig(M1B, 2, 0),
    _mig(M1C, 2, 1),
    DeviceInfo(2, AMD0, "AMD Instinct MI300X", "0000:c1:00.0", 192 << 30, 750.0, vendor=Vendor.AMD),
)

C = ContainerRef("ml", "pod-0", "main")


def _a(device_id: str, resource: str = "nvidia.com/gpu") -> Assignment:
    return Assignment(C, resource, device_id)


@pytest.mark.parametrize(
    ("device_id", "resource", "expected"),
    [
        (G0, "nvidia.com/gpu", [G0]),
        ("GPU-" + G0[4:].upper(), "nvidia.com/gpu", [G0]),
        (f"{G0}::0", "nvidia.com/gpu", [G0]),
        (f"{G0}::17", "nvidia.com/gpu.shared", [G0]),
        (M1A, "nvidia.com/mig-1g.18gb", [M1A]),
        (f"{M1B}::2", "nvidia.com/mig-1g.18gb", [M1B]),
        (f"MIG-{G1}/1/0", "nvidia.com/mig-1g.18gb", [M1A]),
        (f"MIG-{G1}/2/1", "nvidia.com/mig-1g.18gb", [M1C]),
        (f"MIG-{G1}/2/7", "nvidia.com/mig-1g.18gb", [M1B, M1C]),  # no such CI: the whole GPU instance
        (f"MIG-{G0}/1/0", "nvidia.com/mig-1g.18gb", []),
        ("nvidia0", "nvidia.com/gpu", [G0]),
        ("nvidia1", "nvidia.com/gpu", [G1]),  # the parent, not its MIG devices
        ("nvidia0/vgpu3", "nvidia.com/gpu", [G0]),
        ("nvidia1/gi1", "nvidia.com/gpu", [M1A]),
        ("nvidia1/gi2", "nvidia.com/gpu", [M1B, M1C]),
        ("nvidia1/gi2/vgpu0", "nvidia.com/gpu", [M1B, M1C]),
        ("nvidia7", "nvidia.com/gpu", []),
        ("nvidia1/gi9", "nvidia.com/gpu", []),
        ("0000:c1:00.0", "amd.com/gpu", [AMD0]),
        ("0000:C1:00.0", "amd.com/gpu", [AMD0]),
        ("c1:00.0", "amd.com/gpu", [AMD0]),
        ("00000000:c1:00.0", "amd.com/gpu", [AMD0]),
        ("0x9A2B3C4D5E6F7081", "amd.com/gpu", [AMD0]),
        ("0000:1a:00.0", "amd.com/gpu", [G0]),  # any vendor's PCI address works
        ("0000:3b:00.0", "nvidia.com/gpu", [G1]),  # a PCI address names the GPU, never a MIG device of it
        ("0000:c2:00.0", "amd.com/gpu", []),
        ("GPU-00000000-0000-0000-0000-000000000000", "nvidia.com/gpu", []),
        ("", "nvidia.com/gpu", []),
    ],
)
def test_device_id_forms(device_id: str, resource: str, expected: list[str]) -> None:
    a = _a(device_id, resource)
    result = attribute(DEVICES, [a])
    assert result.by_device == {uuid: (a,) for uuid in expected}
    assert result.unmatched == (() if expected else (a,))


def test_time_sliced_gpu_is_shared_in_order() -> None:
    pods = [
        Assignment(ContainerRef("ml", f"infer-{i}", "server"), "nvidia.com/gpu", f"{G0}::{i}")
        for i in range(4)
    ]
    whole = Assignment(ContainerRef("ml", "train-0", "main"), "nvidia.com/gpu", G1)
    got = match_assignments(DEVICES, [*pods, whole])
    assert got == {G0: tuple(pods), G1: (whole,)}


def test_unmatched_are_kept_apart_and_match_returns_only_known() -> None:
    good, bad = _a(G0), _a("nvidia9")
    assert attribute(DEVICES, iter([bad, good])).unmatched == (bad,)
    assert match_assignments(DEVICES, [bad, good]) == {G0: (good,)}
    assert match_assignments((), [good]) == {}


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3B:00.0", "0000:3b:00.0"),
        ("0001:3b:00.1", "0001:3b:00.1"),
        ("nvidia0", None),
        ("3b:00", None),
    ],
)
def test_normalize_pci(raw: str, normal: str | None) -> None:
    assert normalize_pci_bus_id(raw) == normal


# DRA: the node's ResourceSlices say which GPU each device of a driver is (kube/resourceslices.py).
SLICES = {
    "gpu.nvidia.com/node-1/gpu-0": (G0, "0000:1a:00.0"),
    "gpu.nvidia.com/node-1/gpu-1-mig-9-4-1": (M1A,),
    "gpu.nvidia.com/node-1/gpu-5": ("GPU-00000000-0000-0000-0000-000000000000",),  # not on this agent
    "gpu.nvidia.com/node-1/gpu-6": ("GPU-00000000-0000-0000-0000-000000000000", "0000:3b:00.0"),
    "gpu.amd.com/node-1/gpu-0-128": ("0000:c1:00.0",),
}


def _dra(device: str, driver: str = "gpu.nvidia.com") -> Assignment:
    return Assignment(C, driver, f"node-1/{device}", DraDevice(driver, "node-1", device, "ml/claim"))


@pytest.mark.parametrize(
    ("device", "driver", "gpu", "named_by"),
    [
        ("gpu-0", "gpu.nvidia.com", G0, G0),
        ("gpu-1-mig-9-4-1", "gpu.nvidia.com", M1A, M1A),  # a MIG device: its own UUID
        ("gpu-6", "gpu.nvidia.com", G1, "0000:3b:00.0"),  # an unknown UUID, then the bus id
        ("gpu-0-128", "gpu.amd.com", AMD0, "0000:c1:00.0"),  # AMD: the standard pciBusID attribute
    ],
)
def test_dra_device_is_the_gpu_its_resource_slice_names(
    device: str, driver: str, gpu: str, named_by: str
) -> None:
    a = _dra(device, driver)
    result = attribute(DEVICES, [a], SLICES)
    # the attributed assignment carries the id that named the GPU: that is what travels to the scaler
    assert result.by_device == {gpu: (Assignment(C, driver, named_by, a.dra),)}
    assert result.unmatched == () and result.undescribed == ()


def test_dra_device_without_a_slice_or_without_a_gpu_here_is_reported() -> None:
    undescribed, elsewhere = _dra("gpu-9"), _dra("gpu-5")
    result = attribute(DEVICES, [undescribed, elsewhere], SLICES)
    assert result.by_device == {}
    assert result.undescribed == (undescribed,)
    assert result.unmatched == (elsewhere,)
    # without any ResourceSlice (no Kubernetes API): every DRA device is undescribed, plugin ids still work
    plugin = _a(G0)
    result = attribute(DEVICES, [undescribed, plugin])
    assert result.undescribed == (undescribed,) and result.by_device == {G0: (plugin,)}


def test_a_bus_id_several_devices_share_names_none_of_them() -> None:
    # The partitions of one AMD GPU report its bus id; a DRA partition published with that bus id alone
    # cannot be told apart: it stays unattributed rather than go to the wrong pod.
    parts = tuple(
        DeviceInfo(
            i, f"0x{i:016x}", "AMD Instinct MI300X", "0000:c1:00.0", 24 << 30, 750.0, vendor=Vendor.AMD
        )
        for i in range(2)
    )
    a = _dra("gpu-0-128", "gpu.amd.com")
    assert attribute(parts, [a], SLICES).unmatched == (a,)
    assert attribute(parts, [_a("0000:c1:00.0", "amd.com/gpu")]).by_device == {}


def test_amd_dra_devices_by_their_drm_name_even_partitions_of_one_gpu() -> None:
    # Two CPX partitions of one MI300X share its bus id, which its ResourceSlice gives them; their DRA names
    # (gpu-<card>-<render>) tell them apart, with no ResourceSlice needed.
    parts = tuple(
        DeviceInfo(
            i,
            f"0x{i:016x}",
            "AMD Instinct MI300X",
            "0000:c1:00.0",
            24 << 30,
            750.0,
            vendor=Vendor.AMD,
            dra_name=f"gpu-1-{128 + i}",
        )
        for i in range(2)
    )
    a, b = _dra("gpu-1-129", "gpu.amd.com"), _dra("gpu-1-128", "gpu.amd.com")
    result = attribute(parts, [a, b], {})
    assert result.by_device == {
        "0x0000000000000001": (Assignment(C, "gpu.amd.com", "0x0000000000000001", a.dra),),
        "0x0000000000000000": (Assignment(C, "gpu.amd.com", "0x0000000000000000", b.dra),),
    }
    # the name is AMD's: another driver's device of that name is looked up in the slices, not by it
    other = _dra("gpu-1-128", "gpu.nvidia.com")
    assert attribute(parts, [other], {}).undescribed == (other,)
