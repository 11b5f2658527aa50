"""``gpuscale demo --control-plane real``: the demo's demand pattern on the real control plane and KEDA.

Three kwok nodes with 2 GPUs each, a mock ``gpuscale agent`` per node and ``gpuscale scaler`` (``GpuStack``);
Deployment ``demo/llm`` and a ScaledObject as ``gpuscale render --mode external`` writes it (the demo's
profile, ``window`` 2 s, a 10 s scale-down window). Every second the demand (requests/s, from
``gpuscale.demo.patterns``) is spread over the Running pods: each pod's GPU at ``demand / (running pods x
capacity per replica)``, at most 100 %. What it prints is what ``kubectl get hpa,deploy,pods`` would show:
the HPA's current metric (a Kubernetes quantity, ``41667m``, printed as the number it is, 41.7) and desired
replicas, or that the HPA has not synced yet; the Deployment's ``spec.replicas``; the Running pods. The HPA
syncs every 5 s here (its default is 15 s). ``timeline.csv`` goes to ``out_dir``.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..demo.patterns import DemandPattern, make_pattern
from .build import build
from .client import KubeClient
from .errors import KubeRequestFailed
from .launcher import ControlPlane, GpuNode
from .stack import GpuStack

__all__ = [
    "HpaReading",
    "RealDemoSettings",
    "format_number",
    "hpa_reading",
    "hpa_words",
    "parse_quantity",
    "run_real_demo",
]

NAMESPACE, WORKLOAD = "demo", "llm"


@dataclass(frozen=True)
class RealDemoSettings:
    out_dir: Path
    duration: float = 60.0
    pattern: str = "burst"
    profile: str = "online-inference"
    capacity_per_replica: float = 10.0
    every: float = 5.0  # seconds between printed lines


def _scaled_object(settings: RealDemoSettings, scaler: str, min_replicas: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "render",
            "scaledobject",
            "--mode",
            "external",
            "--target",
            f"deployment/{WORKLOAD}",
            "--namespace",
            NAMESPACE,
            "--profile",
            settings.profile,
            "--window",
            "2",
            "--scaler-address",
            scaler,
            "--min-replicas",
            str(min_replicas),
            "--max-replicas",
            "6",
            "--polling-interval",
            "5",
            "--cooldown-period",
            "10",
            "--scale-down-stabilization",
            "10",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (obj,) = [d for d in yaml.safe_load_all(out) if d]
    obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["policies"] = [
        {"type": "Percent", "value": 100, "periodSeconds": 5}
    ]
    return dict(obj)


def run_real_demo(settings: RealDemoSettings, print_line: Callable[[str], None] = print) -> Path:
    """Run the pattern for ``duration`` seconds; return the timeline's path. Ctrl-C ends it early."""
    binaries = build(print_line)
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    workdir = settings.out_dir / "control-plane"
    nodes = [GpuNode(f"gpu-node-{c}", 2) for c in "abc"]
    pattern = make_pattern(settings.pattern, settings.duration, settings.capacity_per_replica)
    timeline = settings.out_dir / "timeline.csv"
    with ControlPlane(binaries, workdir, nodes=nodes, hpa_sync_period="5s", say=print_line) as plane:
        stack = GpuStack(plane)
        stack.start()
        _deploy_workload(plane.client, settings, stack.scaler_address)
        print_line(f"kubeconfig: {plane.kubeconfig} (namespace {NAMESPACE}); logs: {plane.log_dir}")
        rows: list[dict[str, Any]] = []
        try:
            _follow_pattern(plane, stack, pattern, settings, rows, print_line)
        except KeyboardInterrupt:
            print_line("stopped early")
        finally:
            stack.stop()
        _write_timeline(rows, timeline)
    return timeline


def _deploy_workload(client: KubeClient, settings: RealDemoSettings, scaler_address: str) -> None:
    """The demo's namespace, its Deployment of one GPU per pod, and the ScaledObject on the scaler."""
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    min_replicas = 1  # workload scope cannot wake a workload from zero (docs/metadata.md)
    client.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": WORKLOAD, "namespace": NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": WORKLOAD}},
                "template": {
                    "metadata": {"labels": {"app": WORKLOAD}},
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "llm:1",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ]
                    },
                },
            },
        }
    )
    client.apply(_scaled_object(settings, scaler_address, min_replicas))


def _follow_pattern(
    plane: ControlPlane,
    stack: GpuStack,
    pattern: DemandPattern,
    settings: RealDemoSettings,
    rows: list[dict[str, Any]],
    print_line: Callable[[str], None],
) -> None:
    """Once a second until ``duration``: check the components, set the GPUs' load from the demand, append a
    row to ``rows``; print a line every ``settings.every`` seconds."""
    start = time.monotonic()
    last_print = -settings.every
    while (t := time.monotonic() - start) < settings.duration:
        plane.check()
        demand, phase = pattern.at(t)
        row, hpa = _step(plane.client, stack, settings, t, demand, phase)
        rows.append(row)
        if t - last_print >= settings.every:
            last_print = t
            print_line(
                f"t={t:5.1f}s {phase:<16} demand {demand:5.1f} req/s GPU {row['gpu_percent']:5.1f}% "
                f"{hpa_words(hpa)}  deploy {row['spec_replicas']}  running {row['running']}"
            )
        time.sleep(1.0)


def _step(
    client: KubeClient, stack: GpuStack, settings: RealDemoSettings, t: float, demand: float, phase: str
) -> tuple[dict[str, Any], HpaReading]:
    """One second of the demo: the demand spread over the Running pods' GPUs, and the row of what the
    cluster shows (the Deployment, the pods, the HPA)."""
    deploy = client.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{WORKLOAD}")
    pods = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app%3D{WORKLOAD}")["items"]
    running = sum(
        1
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )
    per_pod = min(100.0, 100.0 * demand / (max(running, 1) * settings.capacity_per_replica))
    stack.set_load(per_pod if running else 0.0)
    hpa = hpa_reading(_hpa(client))
    row = {
        "t": round(t, 1),
        "phase": phase,
        "demand": round(demand, 1),
        "gpu_percent": round(per_pod if running else 0.0, 1),
        "hpa_metric": "" if hpa.metric is None else round(hpa.metric, 3),
        "hpa_desired": "" if hpa.desired is None else hpa.desired,
        "spec_replicas": deploy["spec"].get("replicas", 0),
        "running": running,
    }
    return row, hpa


def _write_timeline(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["t"])
        writer.writeheader()
        writer.writerows(rows)


def _hpa(client: KubeClient) -> dict[str, Any] | None:
    try:
        h: dict[str, Any] = client.get(
            f"/apis/autoscaling/v2/namespaces/{NAMESPACE}/horizontalpodautoscalers/keda-hpa-{WORKLOAD}"
        )
    except KubeRequestFailed:  # KEDA has not made it yet
        return None
    return h


@dataclass(frozen=True)
class HpaReading:
    """What ``kubectl get hpa`` shows of the HPA KEDA made: ``synced`` once the HPA controller has synced it
    (its status has conditions); its current metric as a number; its desired replicas (None until synced)."""

    exists: bool
    synced: bool
    metric: float | None
    desired: int | None


_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?")
_SUFFIX = {
    "": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip


def parse_quantity(text: str) -> float:
    """A Kubernetes quantity as a number: ``41667m`` → 41.667, ``40`` → 40, ``2k`` → 2000, ``1Ki`` → 1024."""
    m = _QUANTITY.fullmatch(text.strip())
    if m is None:
        raise ValueError(f'"{text}" is not a Kubernetes quantity')
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""]


def format_number(value: float) -> str:
    """A metric as a person reads it: ``41.667`` → ``41.7``, ``40.0`` → ``40``, ``0.05`` → ``0.05``."""
    if value == int(value):
        return str(int(value))
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.2g}"


def hpa_reading(hpa: dict[str, Any] | None) -> HpaReading:
    if hpa is None:
        return HpaReading(exists=False, synced=False, metric=None, desired=None)
    status = hpa.get("status") or {}
    # KEDA creates the HPA with an empty status (desiredReplicas 0); the HPA controller's first sync sets
    # its conditions (AbleToScale, ScalingActive), whether or not it could read the metric
    synced = bool(status.get("conditions"))
    metric = None
    for m in status.get("currentMetrics") or []:
        current = (m.get("external") or {}).get("current") or {}
        raw = current.get("averageValue") or current.get("value")
        if raw is not None:
            metric = parse_quantity(str(raw))
            break
    desired = status.get("desiredReplicas")
    return HpaReading(
        exists=True,
        synced=synced,
        metric=metric,
        desired=int(desired) if synced and desired is not None else None,
    )


def hpa_words(hpa: HpaReading) -> str:
    """``hpa metric 41.7 desired 5``; before the HPA exists or has synced, say so instead of its zeros."""
    if not hpa.exists:
        return f"{'hpa not created yet':<30}"
    if not hpa.synced:
        return f"{'hpa not synced yet':<30}"
    metric = "-" if hpa.metric is None else format_number(hpa.metric)
    desired = "-" if hpa.desired is None else str(hpa.desired)
    return f"hpa metric {metric:<7} desired {desired:<3}"
