"""``gpuscale demo``: the whole loop on one machine, with no GPU, no cluster and no network.

A demo cluster (a local Kubernetes API and kubelet PodResources servers: ``apiserver``, ``kubelet``), mock
agents and the cluster scaler as real processes over real gRPC, and a controller that does what KEDA and the
HPA do (``controller``, with ``gpuscale.sim``'s arithmetic), and with an engine profile a stand-in gateway in
front of the pods (``gateway``) that the scaler reads as the workload's request path. Replicas become pods on
the mock GPUs (``placement``, ``cluster``); a demand pattern (``patterns``) loads them; ``view`` shows it live
and ``output`` writes the timeline and the plot. ``run_demo`` (``run``) ties it together.
"""

from __future__ import annotations

from .errors import ChildFailed, DemoError
from .patterns import PATTERNS
from .run import run_demo
from .settings import DemoResult, DemoSettings, Wake

__all__ = ["PATTERNS", "ChildFailed", "DemoError", "DemoResult", "DemoSettings", "Wake", "run_demo"]
