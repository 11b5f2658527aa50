"""The agent's settings, built by the CLI from flags and ``GPUSCALE_*`` variables and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..tls import TlsFiles

__all__ = ["AgentSettings"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    node_name: str
    interval: float = 1.0
    grpc_address: str = "0.0.0.0:6000"
    metrics_address: str = "0.0.0.0:9400"
    kubelet_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    hostname_label: str = "Hostname"
    kubeconfig: str | None = None
    in_cluster: bool = False
    # Seconds of samples kept per GPU (the longest smoothing window the scaler may ask for).
    history_seconds: float = 300.0
    # How often the kubelet's PodResources API is asked who holds which GPU.
    attribution_interval: float = 5.0
    # A single GPU read that takes longer than this is abandoned and counted as a timeout.
    read_timeout: float = 5.0
    # a device id the kubelet names but the backend does not list (a MIG layout changed, a dynamic MIG
    # device created for a claim) makes the agent list its devices again, at most this often
    rediscover_interval: float = 60.0
    proc_root: Path = Path("/proc")
    extra_resource_names: tuple[str, ...] = field(default=())
    serve_external_scaler: bool = False
    tls: TlsFiles | None = None  # the gRPC server's (Watch, and the node-scope external scaler)

    @property
    def history_length(self) -> int:
        return max(2, int(self.history_seconds / self.interval) + 1)
