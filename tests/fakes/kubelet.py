"""The fake kubelet of the tests: the demo cluster's local PodResources server, under its test name.

One implementation (``gpuscale.demo.kubelet``) serves both the demo and the tests.
"""

from __future__ import annotations

from gpuscale.demo.kubelet import LocalKubelet as FakeKubelet
from gpuscale.demo.kubelet import dra_claim, pod_resources

__all__ = ["FakeKubelet", "dra_claim", "pod_resources"]
