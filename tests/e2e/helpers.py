"""What the end-to-end tests do on the real control plane: namespaces, Deployments, ScaledObjects written by
``gpuscale render`` (the CLI users run), and waiting on what ``kubectl get deploy,hpa,pods`` would show."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

import yaml

from gpuscale.controlplane.client import KubeClient, wait_for

Json = dict[str, Any]


def make_namespace(client: KubeClient, name: str) -> str:
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # the service-account controller gives it "default", which ServiceAccount admission needs for pods
    wait_for(
        f"ServiceAccount {name}/default",
        lambda: client.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default") or None,
        30,
    )
    return name


def delete_namespace(client: KubeClient, name: str) -> None:
    """The ScaledObjects first (KEDA removes its HPAs), then the namespace (pods go through kwok's delete)."""
    for so in client.get(f"/apis/keda.sh/v1alpha1/namespaces/{name}/scaledobjects").get("items", []):
        client.delete(f"/apis/keda.sh/v1alpha1/namespaces/{name}/scaledobjects/{so['metadata']['name']}")
    client.delete(f"/api/v1/namespaces/{name}")


def deployment(
    client: KubeClient,
    namespace: str,
    name: str,
    *,
    replicas: int,
    gpus: int = 1,
    node: str | None = None,
) -> None:
    spec: Json = {
        "containers": [
            {"name": "main", "image": f"{name}:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        ]
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    client.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        }
    )


def render_scaled_object(*args: str) -> Json:
    """``gpuscale render scaledobject ARGS``, parsed."""
    out = subprocess.run(
        [sys.executable, "-m", "gpuscale", "render", "scaledobject", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (obj,) = [d for d in yaml.safe_load_all(out) if d]
    return dict(obj)


def fast_scale_down(obj: Json, window_s: int = 5) -> Json:
    """A short scale-down stabilization window, and scale-down not rate-limited, so tests end in seconds."""
    obj["spec"].setdefault("advanced", {})["horizontalPodAutoscalerConfig"] = {
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": window_s,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}],
            }
        }
    }
    return obj


def spec_replicas(client: KubeClient, namespace: str, name: str) -> int:
    return int(
        client.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")["spec"].get("replicas", 1)
    )


def running_pods(client: KubeClient, namespace: str, app: str) -> list[Json]:
    pods = client.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}")["items"]
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def wait_replicas(
    client: KubeClient,
    namespace: str,
    name: str,
    ok: Callable[[int], bool],
    timeout: float,
    *,
    what: str = "",
    history: list[int] | None = None,
    timeline: list[tuple[float, int]] | None = None,
) -> int:
    """Poll ``spec.replicas`` until ``ok(replicas)``; every value seen is appended to ``history``, and with
    the ``time.monotonic()`` it was first seen at to ``timeline``."""

    def probe() -> int | None:
        n = spec_replicas(client, namespace, name)
        if history is not None and (not history or history[-1] != n):
            history.append(n)
        if timeline is not None and (not timeline or timeline[-1][1] != n):
            timeline.append((time.monotonic(), n))
        return n if ok(n) else None

    try:
        return wait_for(f"{namespace}/{name} spec.replicas {what}", probe, timeout, interval=0.5)
    except TimeoutError as e:
        raise TimeoutError(f"{e}; seen {history}; {_why(client, namespace)}") from None


def _why(client: KubeClient, namespace: str) -> str:
    """What ``kubectl describe hpa,scaledobject`` would say, for a failure message."""
    out = []
    for kind, path in (
        ("HPA", f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers"),
        ("ScaledObject", f"/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects"),
    ):
        for obj in client.get(path).get("items", []):
            status = obj.get("status", {})
            conds = [
                f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
                for c in status.get("conditions", [])
            ]
            out.append(
                f"{kind} {obj['metadata']['name']}: {conds} {status.get('currentMetrics') or status.get('health') or ''}"
            )
    return "; ".join(out)


def wait_running(client: KubeClient, namespace: str, app: str, count: int, timeout: float) -> list[Json]:
    return wait_for(
        f"{count} pods of {namespace}/{app} Running",
        lambda: pods if len(pods := running_pods(client, namespace, app)) == count else None,
        timeout,
        interval=0.5,
    )


def attributed_pods(metrics_urls: Sequence[str]) -> set[tuple[str, str]]:
    """(namespace, pod) of every GPU series the agents label with a pod."""
    out = set()
    for url in metrics_urls:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'pod="' in line:
                labels = line[line.index("{") + 1 : line.index("}")]
                kv = dict(part.split("=", 1) for part in labels.split('",') if "=" in part)
                out.add((kv["namespace"].strip('"'), kv["pod"].strip('"')))
    return out


def hpa(client: KubeClient, namespace: str, scaled_object: str) -> Json:
    return client.get(
        f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/keda-hpa-{scaled_object}"
    )


def scaled_object(client: KubeClient, namespace: str, name: str) -> Json:
    return client.get(f"/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects/{name}")


def condition(obj: Json, kind: str) -> str | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def sleep_watching(seconds: float, check: Callable[[], None]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check()
        time.sleep(0.5)


def wait_metric_seen(
    client: KubeClient, namespace: str, scaled_object_name: str, timeout: float = 60
) -> None:
    """Until the HPA of the ScaledObject shows a current value for its external metric."""

    def seen() -> bool | None:
        current = hpa(client, namespace, scaled_object_name).get("status", {}).get("currentMetrics") or []
        return True if current and current[0].get("external", {}).get("current") else None

    wait_for("the HPA reads the external metric", seen, timeout)


def wait_attributed(metrics_urls: Sequence[str], pods: set[tuple[str, str]], timeout: float = 30) -> None:
    """Until the agents' /metrics attribute a GPU to every one of ``pods`` ((namespace, name))."""

    def all_attributed() -> set[tuple[str, str]] | None:
        seen = attributed_pods(metrics_urls)
        return seen if pods <= seen else None

    wait_for("the agents attribute a GPU to every pod", all_attributed, timeout)


def host_ipv4() -> str | None:
    """An IPv4 address of this host that the API server takes in an EndpointSlice (it refuses loopback,
    link-local and multicast ones), or ``None`` when the host has none. Tried in turn: the source address of
    the default route (a UDP ``connect`` sends nothing), the host name's addresses, ``ip -4 addr``."""
    seen: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: routed by the default route, never answered
            seen.append(s.getsockname()[0])
        except OSError:
            pass  # no route: look further
    for name in {socket.gethostname(), socket.getfqdn()}:
        try:
            seen += [str(a[4][0]) for a in socket.getaddrinfo(name, None, socket.AF_INET)]
        except OSError:
            pass
    if shutil.which("ip"):
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=False)
        seen += [f.split("/")[0] for line in out.stdout.splitlines() for f in line.split()[3:4]]
    for text in seen:
        try:
            ip = ipaddress.IPv4Address(text)
        except ValueError:
            continue
        if not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified):
            return text
    return None


def selectorless_service(
    client: KubeClient, namespace: str, name: str, port: tuple[str, int], address: str, target_port: int
) -> None:
    """Service ``name`` without a selector, its port ``port`` (name, number), and the EndpointSlice that
    leads it to ``address:target_port``, Ready, as one written for an endpoint outside the cluster."""
    port_name, number = port
    client.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": port_name, "port": number, "targetPort": target_port}]},
        }
    )
    client.apply(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-1",
                "namespace": namespace,
                "labels": {
                    "kubernetes.io/service-name": name,
                    # not the EndpointSlice controller's: it leaves a slice another manager owns alone
                    "endpointslice.kubernetes.io/managed-by": "e2e.gpuscale.io",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": port_name, "port": target_port, "protocol": "TCP"}],
        }
    )


class Background:
    """A loop in a daemon thread while a ``with`` block runs: ``tick`` every ``interval`` s, a tick that fails
    (the API server restarting, etcd paused) tried again at the next; ``first`` once, before the caller goes
    on; on leaving, the loop stops and the thread is joined for ``join_s`` at most."""

    def __init__(self, name: str, interval: float, join_s: float = 15.0) -> None:
        self.interval, self._join_s = interval, join_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def first(self) -> None:
        """What the loop must have done before the ``with`` block starts (nothing by default)."""

    def tick(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.first()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(self._join_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the API server down or slow, a pod gone meanwhile: the next tick sees
                continue


class ModelLoading(Background):
    """Holds the pods of ``app`` not Ready, as a model server is while it loads its model (minutes): kwok
    makes a pod Ready the moment it is scheduled, with no engine behind it. In a background thread, every
    ``interval`` s, each Running pod that kwok made Ready is set back to Ready False (reason ``ModelLoading``)
    through its status; kwok's stages act on Pending pods only, so it stays so. ``loading``: the pods set
    back. A context manager."""

    def __init__(self, client: KubeClient, namespace: str, app: str, interval: float = 0.1) -> None:
        super().__init__(f"model loading {namespace}/{app}", interval, join_s=10)
        self.client, self.namespace, self.app = client, namespace, app
        self.loading: set[str] = set()

    def tick(self) -> None:
        for pod in running_pods(self.client, self.namespace, self.app):
            if condition(pod, "Ready") == "True":
                self._hold(pod)

    def _hold(self, pod: Json) -> None:
        name = pod["metadata"]["name"]
        status = pod["status"]
        conditions = [
            c | {"status": "False", "reason": "ModelLoading"}
            if c["type"] in ("Ready", "ContainersReady")
            else c
            for c in status.get("conditions", [])
        ]
        containers = [c | {"ready": False} for c in status.get("containerStatuses", [])]
        self.client.merge_patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
            {"status": {"conditions": conditions, "containerStatuses": containers}},
        )
        self.loading.add(name)


class ReplicaRecord(Background):
    """Every ``spec.replicas`` the API server records for Deployment ``namespace/name`` while it runs: in a
    background thread, the Deployment read every ``interval`` s, each new ``metadata.generation`` kept with
    its ``spec.replicas`` and the ``time.monotonic()`` it was first read at (``seen``). Every change of the
    spec bumps the generation by one, so a generation skipped between two reads is a change that was never
    seen (``unseen``): the record is complete, or says where it is not. A read that fails (the API server
    restarting, etcd paused) is tried again; nothing can change the record meanwhile. A context manager."""

    def __init__(self, client: KubeClient, namespace: str, name: str, interval: float = 0.2) -> None:
        super().__init__(f"replicas {namespace}/{name}", interval)
        self.client, self.namespace, self.name = client, namespace, name
        self.seen: list[tuple[float, int, int]] = []  # (first read at, generation, spec.replicas)
        self.unseen: list[tuple[int, int]] = []  # (last generation seen, the next one read)
        self._lock = threading.Lock()

    def first(self) -> None:
        self.tick()  # the first entry before the caller goes on

    def tick(self) -> None:  # a read that fails is tried again: the generation says what was missed
        obj = self.client.get(f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.name}")
        generation, replicas = int(obj["metadata"]["generation"]), int(obj["spec"].get("replicas", 1))
        now = time.monotonic()
        with self._lock:
            last = self.seen[-1][1] if self.seen else None
            if last is not None and generation <= last:
                return
            if last is not None and generation > last + 1:
                self.unseen.append((last, generation))
            self.seen.append((now, generation, replicas))

    def between(self, start: float, end: float) -> list[int]:
        """The values of ``spec.replicas`` in force from ``start`` to ``end`` (``time.monotonic()``), in order:
        the one in force at ``start``, then each new one read up to ``end``."""
        with self._lock:
            seen = list(self.seen)
        before = [r for t, _, r in seen if t <= start][-1:]
        return before + [r for t, _, r in seen if start < t <= end]

    def unseen_between(self, start: float, end: float) -> list[tuple[int, int]]:
        """The generations skipped by reads from ``start`` to ``end``: changes of the spec never seen."""
        with self._lock:
            gens = {g: t for t, g, _ in self.seen}
            return [(a, b) for a, b in self.unseen if start < gens[b] <= end]
