"""Faults in the real loop: broken monitoring never scales a workload down, for the whole loop (gpuscale's
agents and scaler, KEDA's operator and metrics server, the HPA in kube-controller-manager, kube-apiserver,
etcd), one fault at a time.

The module runs its own control plane (the faults stop parts of it) with five kwok nodes of four mock GPUs,
an agent on each and the scaler (``GpuStack``), and two workloads, each held by the ScaledObject
``gpuscale render`` writes (external, workload scope, ``gpu_utilization`` avg, target 50, and its fallback:
``currentReplicasIfHigher`` of 2 after 3 failed polls):

* ``faults-a/llm``: 4 replicas, one on each of gpu-node-1..4 (a topology spread), under a steady demand of
  190 GPU-% shared by its running pods (47.5 % each at 4), so the HPA asks for ceil(190 / 50) = 4 whatever
  runs: the load's replicas. A reading a quarter low (one pod counted as 0) would ask for 3.
* ``faults-b/bystander``: 2 replicas on gpu-node-5 under 95 GPU-% (ceil(95 / 50) = 2), with its own
  ScaledObject; no fault is aimed at it, and its spec must never change.

Timings, shortened in the ScaledObjects (rendered, then the scale-down behaviour replaced): ``staleAfter``
3 s (``window`` 1 s; the agents sample every second), ``pollingInterval`` 1 s with ``failureThreshold`` 3
(3 s of failed polls), the HPA's scale-down window 3 s and then 100 % a second (rendered: 300 s, then a pod
a minute), the HPA syncing every second. Each fault lasts FAULT_S = 15 s, longer than the three one after
another (a stale sample, the failed polls, the scale-down window: 9 s) with the syncs between. Half-way
through, ``llm``'s demand moves between 190 and 170 GPU-% (both ask for 4), so a value the HPA shows
afterwards was read after the fault began. Then the part is restored, and the loop must be healthy again
within RECOVER_S = 45 s: both ScaledObjects Ready without fallback and their triggers Happy, both HPAs
ScalingActive showing the current demand, the scaler answering OK with no pod missing, ``llm`` at 4; and stay
so SETTLE_S = 4 s, past the scale-down window. The time from the fault's end (the part started again or
resumed) to healthy is the recovery time.

From the fault's start to that end, a ``ReplicaRecord`` of each Deployment (every generation of its spec,
read from the API server) must show ``llm`` never below 4 and ``bystander`` never changed, and the loop must
have shown the fault where it can (the scaler unreachable, its missing pods, the HPA failing to get the
metric, the API unreachable). What it showed (``Shown``) is recorded with the replicas and the recovery
time; ``GPUSCALE_FAULTS_RESULTS=PATH`` writes them there as JSON (``bench/faults_real_loop.py``).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuscale.controlplane import Binaries, ControlPlane, GpuNode
from gpuscale.controlplane.client import KubeClient, wait_for
from gpuscale.controlplane.components import Process
from gpuscale.controlplane.stack import GpuStack

from .helpers import (
    Background,
    ReplicaRecord,
    condition,
    fast_scale_down,
    hpa,
    make_namespace,
    render_scaled_object,
    running_pods,
    scaled_object,
    spec_replicas,
    wait_attributed,
    wait_running,
)

TARGET = 50
STALE_AFTER_S, WINDOW_S, POLLING_S, FAILURE_THRESHOLD, SCALE_DOWN_S = 3, 1, 1, 3, 3
FAULT_S, RECOVER_S, SETTLE_S = 15.0, 45.0, 4.0
DEMANDS = (190.0, 170.0)  # llm's, in turn from one fault to the next: ceil(190 / 50) = ceil(170 / 50) = 4
POOL = "e2e.gpuscale.io/pool"
NODES = tuple(GpuNode(f"gpu-node-{i}", 4, {POOL: "a" if i <= 4 else "b"}) for i in range(1, 6))
RESULTS_ENV = "GPUSCALE_FAULTS_RESULTS"


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str
    replicas: int  # the load's: ceil(demand / TARGET)
    demand: float  # GPU-% shared by the running pods
    pool: str
    max_replicas: int

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in NODES if n.labels[POOL] == self.pool]


LLM = Workload("faults-a", "llm", 4, DEMANDS[0], "a", 8)
BYSTANDER = Workload("faults-b", "bystander", 2, 95.0, "b", 4)
# every fault's test: its setup (the first: the module's too), the fault, recovery and settling; under half
TIMEOUT_S = 180


class Demand(Background):
    """The load: each workload's demand shared evenly by its running pods, as a served workload's is (a
    replica more, a smaller share each), on its pool's nodes. The pods are counted again every 0.5 s; while
    the API server cannot be read the last count stands. ``set`` moves a workload's demand at once. A
    context manager."""

    def __init__(self, stack: GpuStack, workloads: tuple[Workload, ...]) -> None:
        super().__init__("demand", 0.5)
        self.stack = stack
        self.demand = {w: w.demand for w in workloads}
        self._pods = dict.fromkeys(workloads, 0)
        self._lock = threading.Lock()

    def first(self) -> None:
        self._count(write=True)

    def tick(self) -> None:  # while the API server cannot be read, the load stays as it is
        self._count()

    def set(self, w: Workload, demand: float) -> None:
        with self._lock:
            self.demand[w] = demand
            self._write()

    def _count(self, *, write: bool = False) -> None:
        client = self.stack.plane.client
        pods = {w: max(1, len(running_pods(client, w.namespace, w.name))) for w in self._pods}
        with self._lock:
            if write or pods != self._pods:
                self._pods = pods
                self._write()

    def _write(self) -> None:
        self.stack.set_load(0.0, {n: self.demand[w] / self._pods[w] for w in self._pods for n in w.nodes})


class Shown(Background):
    """What the loop showed for a workload every 0.5 s, as ``kubectl describe`` and the scaler's
    ``/metrics`` would: KEDA's ``Fallback`` condition and trigger health, the HPA's ``ScalingActive``, the
    scaler's last ``GetMetrics`` code and missing pods; ``api``/``scaler`` ``unreachable`` when they did
    not answer. A context manager."""

    def __init__(self, stack: GpuStack, w: Workload) -> None:
        super().__init__(f"shown {w.name}", 0.5)
        self.stack, self.w = stack, w
        self.seen: list[tuple[float, dict[str, str]]] = []

    def tick(self) -> None:
        now = self.observe()
        self.seen.append((time.monotonic(), now))

    def observe(self) -> dict[str, str]:
        client, w = self.stack.plane.client, self.w
        out: dict[str, str] = {}
        try:
            so = scaled_object(client, w.namespace, w.name)
            health = sorted({str(h.get("status")) for h in so.get("status", {}).get("health", {}).values()})
            out["keda"] = f"Fallback {condition(so, 'Fallback')}, trigger {'/'.join(health) or '-'}"
            active = _condition_of(hpa(client, w.namespace, w.name), "ScalingActive")
            out["hpa"] = f"ScalingActive {active.get('status')} {active.get('reason', '')}".strip()
        except Exception:
            out["api"] = "unreachable"
        try:
            code, missing = scaler_answer(self.stack, w)
            out["scaler"] = f"code {code}, missing pods {missing}"
        except Exception:
            out["scaler"] = "unreachable"
        return out

    def between(self, start: float, end: float) -> dict[str, list[str]]:
        out: dict[str, set[str]] = {}
        for t, shown in list(self.seen):
            if start <= t <= end:
                for k, v in shown.items():
                    out.setdefault(k, set()).add(v)
        return {k: sorted(v) for k, v in sorted(out.items())}


def _condition_of(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == kind), {})


def scaler_answer(stack: GpuStack, w: Workload) -> tuple[int | None, int | None]:
    """The scaler's last ``GetMetrics`` code for ``w``'s ScaledObject and the pods it found missing."""
    url = f"http://127.0.0.1:{stack.scaler_metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=2) as r:
        text = r.read().decode()
    labels = f'{{namespace="{w.namespace}",scaledobject="{w.name}"}}'
    found: dict[str, int] = {}
    for name in ("gpuscale_scaler_trigger_code", "gpuscale_scaler_missing_pods"):
        m = re.search(rf"^{name}{re.escape(labels)} (\S+)$", text, re.M)
        if m:
            found[name] = int(float(m.group(1)))
    return found.get("gpuscale_scaler_trigger_code"), found.get("gpuscale_scaler_missing_pods")


def not_healthy(stack: GpuStack, w: Workload, demand: float) -> list[str]:
    """What keeps the loop from holding ``w`` at its load's replicas, the HPA showing the value of
    ``demand``; [] when nothing."""
    client, out = stack.plane.client, []
    so = scaled_object(client, w.namespace, w.name)
    health = so.get("status", {}).get("health", {})
    if condition(so, "Ready") != "True" or condition(so, "Fallback") == "True":
        out.append(f"ScaledObject Ready {condition(so, 'Ready')}, Fallback {condition(so, 'Fallback')}")
    if any(h.get("status") != "Happy" for h in health.values()):
        out.append(f"trigger health {health}")
    status = hpa(client, w.namespace, w.name).get("status", {})
    current = (status.get("currentMetrics") or [{}])[0].get("external", {}).get("current", {})
    value = _quantity(current.get("averageValue", "nan"))
    active = _condition_of({"status": status}, "ScalingActive")
    if active.get("status") != "True":
        out.append(f"HPA ScalingActive {active.get('status')} {active.get('reason')}")
    elif not abs(value - demand / w.replicas) < 0.5:
        out.append(f"HPA shows {value}, not {demand / w.replicas}")
    code, missing = scaler_answer(stack, w)
    if code != 0 or missing != 0:
        out.append(f"scaler code {code}, missing pods {missing}")
    if (n := spec_replicas(client, w.namespace, w.name)) != w.replicas:
        out.append(f"spec.replicas {n}")
    return out


def _quantity(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def wait_healthy(
    demand: Demand, timeout: float, waited: list[tuple[float, list[str]]] | None = None
) -> float:
    """Until ``not_healthy`` is empty for every workload; the ``time.monotonic()`` it was. ``waited``: each
    new list of what was not yet, with its time."""
    last: list[str] = []

    def probe() -> float | None:
        nonlocal last
        try:
            last = [p for w, d in demand.demand.items() for p in not_healthy(demand.stack, w, d)]
        except Exception as e:  # the API server or the scaler not answering yet
            last = [f"{type(e).__name__}: {e}"[:160]]
        if waited is not None and (not waited or waited[-1][1] != last):
            waited.append((time.monotonic(), last))
        return None if last else time.monotonic()

    try:
        return wait_for("the loop healthy", probe, timeout, interval=0.25)
    except TimeoutError as e:
        raise TimeoutError(f"{e}: {last}") from None


def deployment(client: KubeClient, w: Workload) -> None:
    """``w``'s Deployment: a GPU each, on its pool's nodes, spread one a node."""
    spread = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}
    client.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": w.name, "namespace": w.namespace},
            "spec": {
                "replicas": w.replicas,
                "selector": {"matchLabels": {"app": w.name}},
                "template": {
                    "metadata": {"labels": {"app": w.name}},
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": f"{w.name}:1",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                        "nodeSelector": {POOL: w.pool},
                        "topologySpreadConstraints": [
                            spread | {"labelSelector": {"matchLabels": {"app": w.name}}}
                        ],
                    },
                },
            },
        }
    )


def scale_with_gpuscale(client: KubeClient, scaler_address: str, w: Workload) -> None:
    """The ScaledObject ``gpuscale render`` writes for ``w``, its timings shortened (see the docstring)."""
    so = render_scaled_object(
        "--mode", "external", "--target", f"deployment/{w.name}", "--namespace", w.namespace,
        "--scaler-address", scaler_address, "--metric", "gpu_utilization", "--aggregation", "avg",
        "--target-value", str(TARGET), "--window", str(WINDOW_S), "--stale-after", str(STALE_AFTER_S),
        "--min-replicas", "1", "--max-replicas", str(w.max_replicas), "--polling-interval", str(POLLING_S),
        "--fallback-replicas", "2", "--fallback-failure-threshold", str(FAILURE_THRESHOLD),
    )  # fmt: skip
    assert so["spec"]["fallback"] == {
        "failureThreshold": FAILURE_THRESHOLD,
        "replicas": 2,
        "behavior": "currentReplicasIfHigher",
    }
    client.apply(fast_scale_down(so, window_s=SCALE_DOWN_S))


@dataclass
class Loop:
    plane: ControlPlane
    stack: GpuStack
    demand: Demand
    llm: ReplicaRecord
    bystander: ReplicaRecord
    shown: Shown
    results: list[dict[str, Any]] = field(default_factory=list)

    def fault(
        self, what: str, begin: Callable[[], object], end: Callable[[], object], shows: str | None
    ) -> None:
        """``begin()``, FAULT_S s, ``end()``; the loop healthy again within RECOVER_S s and SETTLE_S s more.
        Half-way through, ``llm``'s demand moves between DEMANDS (both ask for 4), so the value the HPA
        shows at the end was read after the fault began. ``shows``: what the loop shows during the fault
        (``Shown``'s ``key: value``), if anything must. The record of both Deployments over all of it is
        kept in ``results``, then asserted."""
        wait_healthy(self.demand, 30)  # as the last test left it
        moved = DEMANDS[1] if self.demand.demand[LLM] == DEMANDS[0] else DEMANDS[0]
        t0 = time.monotonic()
        begin()
        try:
            time.sleep(FAULT_S / 2)
            self.demand.set(LLM, moved)
            time.sleep(FAULT_S / 2)
        finally:
            t_end = time.monotonic()
            end()
        failed: Exception | None = None
        waited: list[tuple[float, list[str]]] = []
        try:
            t_back = wait_healthy(self.demand, RECOVER_S - (time.monotonic() - t_end), waited)
            time.sleep(SETTLE_S)
        except TimeoutError as e:
            failed, t_back = e, float("nan")
        t_done = time.monotonic()
        during, after = self.llm.between(t0, t_end), self.llm.between(t_end, t_done)
        bystander, shown = self.bystander.between(t0, t_done), self.shown.between(t0, t_end)
        self.results.append(
            {
                "test": os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[-1].split(" ")[0],
                "fault": what,
                "fault_s": round(t_end - t0, 1),
                "replicas_during": {"min": min(during), "max": max(during)},
                "replicas_until_settled": {"min": min(after), "max": max(after)},
                "recovery_s": round(t_back - t_end, 1),
                "recovery_waited_on": [[round(t - t_end, 1), problems] for t, problems in waited],
                "bystander_replicas": sorted(set(bystander)),
                "shown_during": shown,
            }
        )
        assert not (unseen := self.llm.unseen_between(t0, t_done)), f"spec changes not seen: {unseen}"
        assert min(during + after) >= LLM.replicas, f"{what}: llm scaled down: {during} then {after}"
        assert bystander == [BYSTANDER.replicas], f"{what}: the bystander changed: {bystander}"
        assert not self.bystander.unseen_between(t0, t_done)
        if failed is not None:
            raise failed
        if shows is not None:
            key, value = shows.split(": ", 1)
            assert value in shown.get(key, []), f"{what}: the loop never showed {shows!r}: {shown}"
        self.plane.check()


@pytest.fixture(scope="module")
def loop(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loop]:
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    with ControlPlane(
        binaries, tmp_path_factory.mktemp("faults"), nodes=NODES, hpa_sync_period="1s"
    ) as plane:
        stack = GpuStack(plane)
        stack.start()
        try:
            client = plane.client
            for w in (LLM, BYSTANDER):
                make_namespace(client, w.namespace)
                deployment(client, w)
            pods = {
                (w.namespace, p["metadata"]["name"])
                for w in (LLM, BYSTANDER)
                for p in wait_running(client, w.namespace, w.name, w.replicas, 60)
            }
            with Demand(stack, (LLM, BYSTANDER)) as demand:
                wait_attributed([a.metrics_url for a in stack.agents.values()], pods)
                for w in (LLM, BYSTANDER):
                    scale_with_gpuscale(client, stack.scaler_address, w)
                wait_healthy(demand, 60)
                with (
                    ReplicaRecord(client, LLM.namespace, LLM.name) as llm,
                    ReplicaRecord(client, BYSTANDER.namespace, BYSTANDER.name) as bystander,
                    Shown(stack, LLM) as shown,
                ):
                    yield Loop(plane, stack, demand, llm, bystander, shown, results)
        finally:
            stack.stop()
    if out := os.environ.get(RESULTS_ENV):
        _write_results(Path(out), binaries, results, time.monotonic() - started)


def _write_results(path: Path, binaries: Binaries, results: list[dict[str, Any]], module_s: float) -> None:
    settings = {
        "nodes": f"{len(NODES)} kwok nodes x 4 mock GPUs",
        "llm": f"{LLM.replicas} replicas, demand {LLM.demand:g} GPU-% shared by its pods, max {LLM.max_replicas}",
        "bystander": f"{BYSTANDER.replicas} replicas, demand {BYSTANDER.demand:g} GPU-%, its own node",
        "target": TARGET,
        "stale_after_s": STALE_AFTER_S,
        "window_s": WINDOW_S,
        "polling_interval_s": POLLING_S,
        "fallback": f"currentReplicasIfHigher 2 after {FAILURE_THRESHOLD} failed polls",
        "hpa_scale_down_window_s": SCALE_DOWN_S,
        "hpa_sync_period_s": 1,
        "fault_s": FAULT_S,
        "recover_within_s": RECOVER_S,
        "settle_s": SETTLE_S,
    }
    doc = {
        "benchmark": "faults_real_loop",
        "versions": binaries.versions,
        "settings": settings,
        "module_s": round(module_s, 1),
        "faults": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def _scaler(loop: Loop) -> Process:
    assert loop.stack.scaler is not None
    return loop.stack.scaler


@pytest.mark.timeout(TIMEOUT_S)
def test_the_scaler_killed_then_restarted(loop: Loop) -> None:
    stack = loop.stack
    what = "gpuscale scaler SIGKILLed, restarted"
    loop.fault(what, stack.kill_scaler, stack.start_scaler, "scaler: unreachable")


@pytest.mark.timeout(TIMEOUT_S)
def test_the_scaler_hung_then_resumed(loop: Loop) -> None:
    scaler = _scaler(loop)
    what = "gpuscale scaler SIGSTOPped, SIGCONT"
    loop.fault(what, scaler.pause, scaler.resume, "scaler: unreachable")


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize(
    ("nodes", "missing"),
    [pytest.param(("gpu-node-1",), 1, id="one"), pytest.param(("gpu-node-1", "gpu-node-2"), 2, id="half")],
)
def test_agents_killed_then_restarted(loop: Loop, nodes: tuple[str, ...], missing: int) -> None:
    """One agent (1 of llm's 4 pods missing), half of llm's (2 of 4: maxMissingPercent 50 is the most
    allowed before UNAVAILABLE; every agent: test_fallback_holds.py)."""

    def begin() -> None:
        for node in nodes:
            loop.stack.kill_agent(node)

    def end() -> None:
        for node in nodes:
            loop.stack.start_agent(node)

    what = f"the agents of {', '.join(nodes)} SIGKILLed ({missing} of llm's 4 pods), restarted"
    loop.fault(what, begin, end, f"scaler: code 0, missing pods {missing}")


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize(
    ("name", "shows"),
    [
        # KEDA's metrics server: the aggregator answers 503, the HPA holds
        pytest.param("keda-adapter", "hpa: ScalingActive False FailedGetExternalMetric", id="keda-adapter"),
        # the adapter waits for the operator's gRPC: the HPA's calls wait, nothing changes
        pytest.param("keda-operator", None, id="keda-operator"),
        # the HPA, and what it held in memory
        pytest.param("kube-controller-manager", None, id="kube-controller-manager"),
        pytest.param("kube-apiserver", "api: unreachable", id="kube-apiserver"),
    ],
)
def test_a_control_plane_component_restarted(loop: Loop, name: str, shows: str | None) -> None:
    stop, start = loop.plane.process(name).stop, lambda: loop.plane.restart(name)
    loop.fault(f"{name} stopped, started again", stop, start, shows)


@pytest.mark.timeout(TIMEOUT_S)
def test_etcd_paused_then_resumed(loop: Loop) -> None:
    etcd = loop.plane.process("etcd")
    loop.fault("etcd SIGSTOPped, SIGCONT", etcd.pause, etcd.resume, "api: unreachable")
