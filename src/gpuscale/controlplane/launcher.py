"""Start the real control plane on loopback: etcd, kube-apiserver (RBAC), kube-controller-manager
(deployment, replicaset, daemonset, HPA, garbage collector, namespace, service-account and node-lifecycle
controllers), kube-scheduler, kwok with fake GPU nodes, the KEDA operator and KEDA's metrics API server
registered as ``external.metrics.k8s.io``.

Each process writes ``<workdir>/logs/<name>.log``; one that exits or does not become ready within its time
raises ``ComponentFailed`` naming it, with the last lines of its log. Every port is a free port chosen at
start, bound to 127.0.0.1, except KEDA's adapter's own ``/metrics`` (``--port``: it has no address flag and
listens on every interface).

The APIService reaches KEDA's adapter on 127.0.0.1 through an ``ExternalName`` Service of ``localhost`` (an
Endpoints object may not hold a loopback address), with ``--enable-aggregator-routing`` left off, and the
adapter's certificate carries ``keda-metrics-apiserver.keda.svc`` for the aggregator's check.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..demo.processes import free_ports
from .build import Binaries
from .client import KubeClient, load_documents, wait_for
from .components import Process, http_ok, insecure_context, start_process
from .errors import ComponentFailed
from .pki import Pki, make_pki, write_kubeconfig

__all__ = ["CONTROLLERS", "ControlPlane", "GpuNode"]

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
KEDA_NAMESPACE = "keda"
APISERVICE = "v1beta1.external.metrics.k8s.io"
EXTERNAL_METRICS = "/apis/external.metrics.k8s.io/v1beta1"  # the APIService's group version, as served
# kube-controller-manager's --controllers (its names: cmd/kube-controller-manager/names/controller_names.go)
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "daemonset-controller",  # the chart's agent DaemonSet gets a pod per kwok node (kwok runs no container)
    "horizontal-pod-autoscaler-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "node-lifecycle-controller",  # lifts the not-ready taint once kwok reports the node Ready
)


@dataclass(frozen=True)
class GpuNode:
    """A kwok node with ``gpus`` allocatable ``nvidia.com/gpu``."""

    name: str
    gpus: int = 4
    labels: dict[str, str] = field(default_factory=dict)


class ControlPlane:
    """``start()`` brings every component up in order; ``stop()`` ends them in reverse. A context manager."""

    def __init__(
        self,
        binaries: Binaries,
        workdir: Path,
        *,
        nodes: Sequence[GpuNode] = (GpuNode("gpu-node-1"), GpuNode("gpu-node-2")),
        hpa_sync_period: str = "15s",
        keda: bool = True,
        say: Any = None,
    ) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.nodes = tuple(nodes)
        self.hpa_sync_period = hpa_sync_period
        self.with_keda = keda
        self.log_dir = workdir / "logs"
        self.processes: list[Process] = []
        self._say = say or (lambda s: None)
        self.pki: Pki | None = None
        self.server = ""
        self.kubeconfig = workdir / "admin.kubeconfig"
        self._client: KubeClient | None = None
        self.ports: dict[str, int] = {}
        # a component's readiness check (what, probe, timeout), kept for restart()
        self._ready: dict[str, tuple[str, Any, float]] = {}

    # ----- what callers use
    @property
    def client(self) -> KubeClient:
        assert self._client is not None, "the control plane is not started"
        return self._client

    def process(self, name: str) -> Process:
        return next(p for p in self.processes if p.name == name)

    def check(self) -> None:
        """Raise ``ComponentFailed`` for the first component that has exited."""
        for p in self.processes:
            p.check()

    def restart(self, name: str) -> Process:
        """Start component ``name`` again with the same command, ports and log (stopping it first if it
        runs: SIGTERM, SIGKILL after 5 s) and wait until it is ready as at start; KEDA's adapter: until the
        aggregator reaches it. What it held in memory is lost. Returns the new process."""
        i, old = next((i, p) for i, p in enumerate(self.processes) if p.name == name)
        old.stop()
        new = old.again()
        self.processes[i] = new
        what, probe, timeout = self._ready[name]
        self._wait(new, what, probe, timeout)
        return new

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- start and stop
    def start(self) -> None:
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.pki = make_pki(self.workdir / "pki")
            names = ["etcd", "etcd-peer", "apiserver", "scheduler", "kwok", "keda-metrics", "keda-probe"]
            names += ["keda-grpc", "keda-adapter", "keda-adapter-metrics"]
            self.ports = dict(zip(names, free_ports(len(names)), strict=True))
            self._etcd()
            self._apiserver()
            self._controller_manager()
            self._scheduler()
            self._kwok()
            if self.with_keda:
                self._keda()
        except BaseException:
            self.stop()
            raise
        self._say(f"control plane up in {time.monotonic() - started:.1f} s; kubeconfig {self.kubeconfig}")

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()
        self.processes.clear()

    def _wait(self, proc: Process, what: str, probe: Any, timeout: float) -> None:
        self._ready.setdefault(proc.name, (what, probe, timeout))

        def checked() -> object | None:
            proc.check()
            result: object | None = probe()
            return result

        try:
            wait_for(what, checked, timeout, fatal=(ComponentFailed,))
        except ComponentFailed:
            raise
        except TimeoutError as e:
            raise proc.failed(f"was not ready within {timeout:g} s ({e})") from None
        self._say(f"  {proc.name} ready")

    def _etcd(self) -> None:
        p, peer = self.ports["etcd"], self.ports["etcd-peer"]
        data = self.workdir / "etcd"
        proc = start_process(
            "etcd",
            [
                str(self.binaries.path("etcd")),
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{p}",
                f"--advertise-client-urls=http://127.0.0.1:{p}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.log_dir,
        )
        self.processes.append(proc)
        self._wait(proc, "etcd /health", lambda: http_ok(f"http://127.0.0.1:{p}/health"), 30)

    def _apiserver(self) -> None:
        assert self.pki is not None
        k, port = self.pki, self.ports["apiserver"]
        self.server = f"https://127.0.0.1:{port}"
        proc = start_process(
            "kube-apiserver",
            [
                str(self.binaries.path("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={k.apiserver_cert}",
                f"--tls-private-key-file={k.apiserver_key}",
                f"--client-ca-file={k.ca_cert}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={k.sa_pub}",
                f"--service-account-signing-key-file={k.sa_key}",
                "--endpoint-reconciler-type=none",
                f"--requestheader-client-ca-file={k.front_proxy_ca}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={k.front_proxy_client_cert}",
                f"--proxy-client-key-file={k.front_proxy_client_key}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
            ],
            self.log_dir,
        )
        self.processes.append(proc)
        write_kubeconfig(
            self.kubeconfig, self.server, k.ca_cert, user="admin", cert=k.admin_cert, key=k.admin_key
        )
        self._client = KubeClient(self.server, k.ca_cert, cert=k.admin_cert, key=k.admin_key)
        client = self._client
        self._wait(
            proc,
            "kube-apiserver /readyz",
            lambda: True if client.request("GET", "/readyz").get("text", "").strip() == "ok" else None,
            90,
        )

    def _controller_manager(self) -> None:
        proc = start_process(
            "kube-controller-manager",
            [
                str(self.binaries.path("kube-controller-manager")),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--horizontal-pod-autoscaler-sync-period={self.hpa_sync_period}",
            ],
            self.log_dir,
        )
        self.processes.append(proc)
        client = self.client
        # the service-account controller making "default" in the default namespace says it is working
        self._wait(
            proc,
            "the default ServiceAccount",
            lambda: client.exists("/api/v1/namespaces/default/serviceaccounts/default") or None,
            60,
        )

    def _scheduler(self) -> None:
        port = self.ports["scheduler"]
        proc = start_process(
            "kube-scheduler",
            [
                str(self.binaries.path("kube-scheduler")),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
            ],
            self.log_dir,
        )
        self.processes.append(proc)
        self._wait(
            proc,
            "kube-scheduler /healthz",
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure_context()),
            60,
        )

    def _kwok(self) -> None:
        proc = start_process(
            "kwok",
            [
                str(self.binaries.path("kwok")),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.binaries.kwok_stages}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.0.0.1",
                f"--server-address=127.0.0.1:{self.ports['kwok']}",
                "--node-lease-duration-seconds=40",
            ],
            self.log_dir,
        )
        self.processes.append(proc)
        for node in self.nodes:
            self.add_node(node)
        client = self.client

        def all_ready() -> bool | None:
            for node in self.nodes:
                conds = client.get(f"/api/v1/nodes/{node.name}").get("status", {}).get("conditions", [])
                if not any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                    return None
            return True

        self._wait(proc, "kwok's nodes Ready", all_ready, 60)

    def add_node(self, node: GpuNode) -> None:
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU_RESOURCE: str(node.gpus)}
        labels = {
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "type": "kwok",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            **node.labels,
        }
        self.client.create(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node.name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
                "status": {"capacity": capacity, "allocatable": capacity},
            },
        )

    def _keda(self) -> None:
        """KEDA's CRDs, its operator, its metrics adapter and the APIService that routes
        ``external.metrics.k8s.io`` to the adapter, each waited for in turn."""
        self._keda_crds()
        env = {
            "WATCH_NAMESPACE": "",
            "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NAMESPACE,
            "POD_NAMESPACE": KEDA_NAMESPACE,
            "POD_NAME": "keda-operator",
            "KUBECONFIG": str(self.kubeconfig),
        }
        self._keda_operator(env)
        adapter = self._keda_adapter(env)
        self._register_keda_adapter()
        client = self.client

        def available() -> bool | None:
            obj = client.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
            conds = obj.get("status", {}).get("conditions", [])
            return True if any(c["type"] == "Available" and c["status"] == "True" for c in conds) else None

        self._wait(adapter, f"APIService {APISERVICE} Available", available, 90)
        # a restarted adapter: the APIService may still read Available, so ask through the aggregator
        self._ready[adapter.name] = (
            f"{EXTERNAL_METRICS} answering",
            lambda: client.exists(EXTERNAL_METRICS) or None,
            90,
        )

    def _keda_crds(self) -> None:
        """KEDA's namespace and CRDs, applied and waited for until Established."""
        client = self.client
        client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KEDA_NAMESPACE}})
        crds = load_documents(self.binaries.keda_crds.read_text(encoding="utf-8"))
        client.apply_all(crds)

        def crds_established() -> bool | None:
            for crd in crds:
                obj = client.get(
                    f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
                )
                conds = obj.get("status", {}).get("conditions", [])
                if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                    return None
            return True

        wait_for("KEDA's CRDs established", crds_established, 30)

    def _keda_operator(self, env: dict[str, str]) -> None:
        assert self.pki is not None
        operator = start_process(
            "keda-operator",
            [
                str(self.binaries.path("keda-operator")),
                f"--kubeconfig={self.kubeconfig}",
                f"--metrics-bind-address=127.0.0.1:{self.ports['keda-metrics']}",
                f"--health-probe-bind-address=127.0.0.1:{self.ports['keda-probe']}",
                f"--metrics-service-bind-address=127.0.0.1:{self.ports['keda-grpc']}",
                f"--cert-dir={self.pki.keda_dir}",
                "--leader-elect=false",
                "--enable-cert-rotation=false",
                "--enable-webhook-patching=false",
                "--enable-apiservice-patching=false",
                "--zap-log-level=info",
            ],
            self.log_dir,
            env,
        )
        self.processes.append(operator)
        self._wait(
            operator,
            "keda-operator /readyz",
            lambda: http_ok(f"http://127.0.0.1:{self.ports['keda-probe']}/readyz"),
            60,
        )

    def _keda_adapter(self, env: dict[str, str]) -> Process:
        """KEDA's metrics adapter, started; it is ready once its APIService is Available."""
        assert self.pki is not None
        certs = self.pki.keda_dir
        adapter = start_process(
            "keda-adapter",
            [
                str(self.binaries.path("keda-adapter")),
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--lister-kubeconfig={self.kubeconfig}",
                f"--kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['keda-adapter']}",
                f"--tls-cert-file={certs / 'tls.crt'}",
                f"--tls-private-key-file={certs / 'tls.key'}",
                f"--cert-dir={certs}",
                f"--metrics-service-address=localhost:{self.ports['keda-grpc']}",
                f"--port={self.ports['keda-adapter-metrics']}",
            ],
            self.log_dir,
            env,
        )
        self.processes.append(adapter)
        return adapter

    def _register_keda_adapter(self) -> None:
        """The ``ExternalName`` Service of ``localhost`` and the APIService that sends
        ``external.metrics.k8s.io`` through it to the adapter, trusting the cluster's CA."""
        assert self.pki is not None
        client = self.client
        ca = base64.b64encode(self.pki.ca_cert.read_bytes()).decode()
        client.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "keda-metrics-apiserver", "namespace": KEDA_NAMESPACE},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            }
        )
        client.apply(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": APISERVICE},
                "spec": {
                    "service": {
                        "name": "keda-metrics-apiserver",
                        "namespace": KEDA_NAMESPACE,
                        "port": self.ports["keda-adapter"],
                    },
                    "group": "external.metrics.k8s.io",
                    "version": "v1beta1",
                    "caBundle": ca,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            }
        )

    # ----- for diagnostics
    def describe(self) -> str:
        return json.dumps(
            {
                "server": self.server,
                "kubeconfig": str(self.kubeconfig),
                "logs": str(self.log_dir),
                **self.ports,
            },
            indent=2,
        )
