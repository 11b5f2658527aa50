"""The real Kubernetes control plane and the real KEDA, built from Go modules and run on loopback, for the
end-to-end tests, the benchmark and ``gpuscale demo --control-plane real``.

``build`` compiles the binaries into a cache keyed by their versions; ``ControlPlane`` starts them;
``kubelet`` is the one stand-in left, the kubelet's PodResources API of a kwok node.
"""

from __future__ import annotations

from .build import Binaries, build
from .errors import BuildFailed, ComponentFailed, ControlPlaneError, KubeRequestFailed
from .launcher import ControlPlane, GpuNode

__all__ = [
    "Binaries",
    "BuildFailed",
    "ComponentFailed",
    "ControlPlane",
    "ControlPlaneError",
    "GpuNode",
    "KubeRequestFailed",
    "build",
]
