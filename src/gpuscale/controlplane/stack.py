"""gpuscale on the real control plane: a PodResources stand-in and a ``gpuscale agent --backend mock`` per
kwok node, and one ``gpuscale scaler``, all reading the real API server; mock GPU load set at run time.

The load is each node's ``--mock-demand-file`` (``{"gpus": {"0": {"utilization": U}, ...}}``), rewritten
atomically by ``set_load``; the agent re-reads it on every sample, so a step in load reaches the next sample.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..demo.processes import free_ports
from .client import wait_for
from .components import Process, start_process
from .errors import ComponentFailed
from .launcher import ControlPlane, GpuNode

__all__ = ["GpuStack", "NodeAgent"]

_SERVING = re.compile(r"serving gRPC on :(\d+)")


# the longest path a unix socket takes here (sun_path is 108 bytes with its NUL; gRPC wants some room)
_SUN_PATH_MAX = 100


@dataclass
class NodeAgent:
    node: GpuNode
    socket: Path
    demand_file: Path
    grpc_port: int
    metrics_port: int
    kubelet: Process | None = None
    agent: Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


@dataclass
class GpuStack:
    """``start()`` runs the stand-in kubelets, the agents and the scaler against ``plane``."""

    plane: ControlPlane
    agent_kubeconfig: Path | None = None  # default: the admin's
    scaler_kubeconfig: Path | None = None
    prefix: str = ""  # names this stack's sockets, demand files and logs apart from another's
    interval: str = "1"
    attribution_interval: str = "1"
    agents: dict[str, NodeAgent] = field(default_factory=dict)
    scaler: Process | None = None
    scaler_port: int = 0
    scaler_metrics_port: int = 0
    _socket_dir: Path | None = field(default=None, repr=False)

    @property
    def scaler_address(self) -> str:
        return f"127.0.0.1:{self.scaler_port}"

    def start(self) -> None:
        work = self.plane.workdir
        # a unix socket's path fits in sun_path (108 bytes): under a deep working directory (a long --out)
        # the kubelet sockets go to a short directory of their own, removed by stop()
        longest = max((len(f"{self.prefix}{n.name}.sock") for n in self.plane.nodes), default=0)
        sockets = work
        if len(str(work.resolve())) + 1 + longest > _SUN_PATH_MAX:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="gpuscale-"))
            sockets = self._socket_dir
        ports = free_ports(2 * len(self.plane.nodes) + 2)
        for i, node in enumerate(self.plane.nodes):
            self.agents[node.name] = NodeAgent(
                node,
                sockets / f"{self.prefix}{node.name}.sock",
                work / f"{self.prefix}{node.name}-demand.json",
                ports[2 * i],
                ports[2 * i + 1],
            )
        self.scaler_port, self.scaler_metrics_port = ports[-2], ports[-1]
        self.set_load(0.0)
        for a in self.agents.values():
            a.kubelet = self._kubelet(a)
            self.plane.processes.append(a.kubelet)
        for a in self.agents.values():
            self.start_agent(a.node.name)
        self.start_scaler()

    def start_scaler(self) -> None:
        """The scaler, on its address (the same after a restart: ScaledObjects name it), serving gRPC."""
        if self.scaler is not None and self.scaler in self.plane.processes:
            self.plane.processes.remove(self.scaler)
        self.scaler = self._python(
            f"{self.prefix}gpuscale-scaler",
            "gpuscale",
            "scaler",
            "--agents",
            ",".join(a.address for a in self.agents.values()),
            "--kubeconfig",
            str(self.scaler_kubeconfig or self.plane.kubeconfig),
            "--grpc-address",
            self.scaler_address,
            "--metrics-address",
            f"127.0.0.1:{self.scaler_metrics_port}",
            # kwok's pods run nothing, so a request path's stand-in gateway runs on the host, behind a Service
            # without a selector whose EndpointSlice names the host's address: such a Service is read only
            # where the operator allows it
            "--request-path-manual-endpoints",
        )
        self._wait_serving(self.scaler)

    def _python(self, name: str, *args: str) -> Process:
        proc = start_process(name, [sys.executable, "-m", *args], self.plane.log_dir)
        self.plane.processes.append(proc)
        return proc

    def _kubelet(self, a: NodeAgent) -> Process:
        return start_process(
            f"{self.prefix}kubelet-{a.node.name}",
            [
                sys.executable,
                "-m",
                "gpuscale.controlplane",
                "kubelet",
                "--kubeconfig",
                str(self.plane.kubeconfig),
                "--node",
                a.node.name,
                "--gpus",
                str(a.node.gpus),
                "--socket",
                str(a.socket),
            ],
            self.plane.log_dir,
        )

    def _wait_serving(self, proc: Process) -> None:
        def serving() -> bool | None:
            proc.check()
            # this start's lines: a restarted process appends to its log, after its command line
            text = proc.log_path.read_text(errors="replace")
            return True if _SERVING.search(text, text.rfind("$ " + " ".join(proc.args))) else None

        try:
            wait_for(f"{proc.name} serving", serving, 30, fatal=(ComponentFailed,))
        except TimeoutError:
            raise proc.failed("did not serve gRPC within 30 s") from None

    def start_agent(self, node: str) -> None:
        a = self.agents[node]
        if a.agent is not None and a.agent in self.plane.processes:
            self.plane.processes.remove(a.agent)
        a.agent = self._python(
            f"{self.prefix}gpuscale-agent-{node}",
            "gpuscale",
            "agent",
            "--backend",
            "mock",
            "--mock-gpus",
            str(a.node.gpus),
            "--node-name",
            node,
            "--kubelet-socket",
            str(a.socket),
            "--kubeconfig",
            str(self.agent_kubeconfig or self.plane.kubeconfig),
            "--mock-demand-file",
            str(a.demand_file),
            "--interval",
            self.interval,
            "--attribution-interval",
            self.attribution_interval,
            "--grpc-address",
            a.address,
            "--metrics-address",
            f"127.0.0.1:{a.metrics_port}",
        )
        self._wait_serving(a.agent)

    def stop(self) -> None:
        """Stop this stack's processes (the control plane stays)."""
        mine = (
            [a.agent for a in self.agents.values()]
            + [a.kubelet for a in self.agents.values()]
            + [self.scaler]
        )
        for p in mine:
            if p is not None and p in self.plane.processes:
                p.stop()
                self.plane.processes.remove(p)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def kill_agent(self, node: str) -> None:
        """SIGKILL the node's agent, as a crash or an OOM kill would."""
        a = self.agents[node]
        assert a.agent is not None
        a.agent.kill()
        self.plane.processes.remove(a.agent)
        a.agent = None

    def kill_scaler(self) -> None:
        """SIGKILL the scaler, as a crash or an OOM kill would; ``start_scaler`` brings it back."""
        assert self.scaler is not None
        self.scaler.kill()
        self.plane.processes.remove(self.scaler)
        self.scaler = None

    def set_load(self, utilization: float, nodes: Mapping[str, float] | None = None) -> None:
        """Every GPU of every node at ``utilization`` %, or per node as ``nodes`` says."""
        for a in self.agents.values():
            u = (nodes or {}).get(a.node.name, utilization)
            doc = {"gpus": {str(i): {"utilization": u} for i in range(a.node.gpus)}}
            tmp = a.demand_file.with_name(f".{a.demand_file.name}.tmp")
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, a.demand_file)
