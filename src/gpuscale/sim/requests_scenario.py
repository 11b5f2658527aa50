"""The scenario ``gpuscale simulate --requests LOG`` builds around a request log: the standard set's policies
(as ``scenarios/azure-conv.yaml`` writes them: KEDA's and the HPA's defaults, gpuscale's triggers, the
oracle) and a gpuscale policy on the named profile, on a workload of the token model. Pure: text from
figures; the command writes it beside its outputs so that it can be edited and run again."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .requests import LogStats, RequestLog
from .tokens import PRESET_GPUS, PRESETS, capacity_per_replica

__all__ = ["RequestsPlan", "plan_for", "scenario_text"]

_HEAD = "    hpaSyncOffsetSeconds: 4\n    kedaPollOffsetSeconds: 9\n"
_SO = """    scaledObject:
      apiVersion: keda.sh/v1alpha1
      kind: ScaledObject
      metadata: {{name: vllm, namespace: llm}}
      spec:
        scaleTargetRef: {{name: vllm}}
{spec}        minReplicaCount: 1
        maxReplicaCount: {max}
        triggers:
{triggers}"""
_FAST = """        pollingInterval: 15
        cooldownPeriod: 300
        advanced:
          horizontalPodAutoscalerConfig:
            behavior:
              scaleUp:
                stabilizationWindowSeconds: 0
                selectPolicy: Max
                policies:
                  - {{type: Percent, value: 900, periodSeconds: 15}}
                  - {{type: Pods, value: {max}, periodSeconds: 15}}
              scaleDown:
                stabilizationWindowSeconds: 300
                policies:
                  - {{type: Pods, value: 1, periodSeconds: 60}}
"""


@dataclass(frozen=True)
class RequestsPlan:
    """The figures of the scenario: the log's span, a replica's capacity, the replicas at the start and at
    most."""

    duration: int
    capacity: float  # requests/s a saturated replica finishes of the log's mean request
    initial: int
    maximum: int
    gpus: int


def _peak(counts: tuple[float, ...], start: int, end: int) -> float:
    """The highest 10-second mean rate in ``[start, end)``."""
    end = min(end, len(counts))
    bins = [sum(counts[i : min(i + 10, end)]) / 10 for i in range(start, end, 10)]
    return max(bins, default=0.0)


def plan_for(stats: LogStats, preset: str) -> RequestsPlan:
    """The figures for a log with ``stats`` on a replica of ``preset``: ``maxReplicaCount`` 1.5 x the
    replicas of the log's 10-second peak (at least 4), initial replicas for its first two minutes."""
    params = PRESETS[preset]
    capacity = round(capacity_per_replica(params, stats.mean_prompt, stats.mean_output), 3)
    counts = stats.counts
    maximum = max(4, math.ceil(1.5 * _peak(counts, 0, len(counts)) / capacity))
    initial = max(1, min(maximum, math.ceil(_peak(counts, 0, 120) / capacity)))
    return RequestsPlan(len(counts), capacity, initial, maximum, PRESET_GPUS.get(preset, 1))


def _trigger(metric: str, target: str, extra: str = "") -> str:
    return (
        "          - type: external-push\n            metadata:\n"
        "              scalerAddress: gpuscale-scaler.gpuscale.svc:6001\n"
        f'              metric: {metric}\n              targetValue: "{target}"\n'
        f"              scope: workload\n{extra}"
    )


def _prometheus(query: str, threshold: str) -> str:
    return (
        "          - type: prometheus\n            metadata:\n"
        "              serverAddress: http://prometheus-operated.monitoring.svc:9090\n"
        f'              query: {query}\n              threshold: "{threshold}"\n'
    )


def _policies(plan: RequestsPlan, profile: str) -> str:
    m = plan.maximum
    rate = f"{0.8 * plan.capacity:.3g}"
    gpuscale = _HEAD + "    pipeline:\n      gpuscale: {samplingIntervalSeconds: 1}\n"
    parts = [
        "  # KEDA's prometheus trigger on dcgm-exporter's GPU utilization, summed over the workload's GPUs\n"
        "  - name: prometheus-dcgm\n" + _HEAD + "    pipeline:\n      prometheus:\n"
        "        exporterIntervalSeconds: 30\n        exporterOffsetSeconds: 11\n"
        "        scrapeIntervalSeconds: 30\n        scrapeOffsetSeconds: 23\n"
        "        signal: sum(gpu_utilization)\n"
        + _SO.format(
            spec="",
            max=m,
            triggers=_prometheus(
                'sum(DCGM_FI_DEV_GPU_UTIL{exported_namespace="llm", exported_pod=~"vllm-.*"})', "70"
            ),
        ),
        "  # KEDA's prometheus trigger on vLLM's waiting requests\n"
        "  - name: prometheus-vllm-queue\n" + _HEAD + "    pipeline:\n      prometheus:\n"
        "        exporterIntervalSeconds: 1\n        scrapeIntervalSeconds: 30\n"
        "        scrapeOffsetSeconds: 23\n"
        "        signal: sum(queue)\n"
        + _SO.format(
            spec="", max=m, triggers=_prometheus('sum(vllm:num_requests_waiting{namespace="llm"})', "5")
        ),
        "  # gpuscale's push trigger on GPU utilization (average x pods in workload scope)\n"
        "  - name: gpuscale-gpu\n"
        + gpuscale
        + _SO.format(
            spec="", max=m, triggers=_trigger("gpu_utilization", "70", "              aggregation: avg\n")
        ),
        f"  # gpuscale's trigger on the engines' demand, target 80 % of a replica's {plan.capacity:g}\n"
        "  - name: gpuscale-engine\n"
        + gpuscale
        + _SO.format(spec="", max=m, triggers=_trigger("request_rate", rate)),
        "  # the same, with the demand forecast one cold start ahead\n"
        "  - name: gpuscale-engine-ahead\n"
        + gpuscale
        + _SO.format(
            spec="", max=m, triggers=_trigger("request_rate", rate, "              scaleAhead: auto\n")
        ),
        f"  # the {profile} profile, with the ScaledObject gpuscale render writes (a fast scale-up)\n"
        f"  - name: gpuscale-{profile}\n"
        + gpuscale
        + _SO.format(
            spec=_FAST.format(max=m),
            max=m,
            triggers=(
                "          - type: external-push\n            metadata:\n"
                "              scalerAddress: gpuscale-scaler.gpuscale.svc:6001\n"
                f"              profile: {profile}\n"
            ),
        ),
        f"  - name: oracle\n    hpaSyncOffsetSeconds: 4\n    oracle: {{minReplicas: 1, maxReplicas: {m}}}\n",
    ]
    return "".join(parts)


def scenario_text(file: str, log: RequestLog, plan: RequestsPlan, preset: str, profile: str) -> str:
    """The scenario, as YAML a user edits: ``file`` the log's path relative to where the text is written."""
    scales = ""
    if log.rate_scale != 1:
        scales += f"  rateScale: {log.rate_scale:g}\n"
    if log.time_scale != 1:
        scales += f"  timeScale: {log.time_scale:g}\n"
    if log.seed:
        scales += f"  seed: {log.seed}\n"
    return f"""# Written by gpuscale simulate --requests: the standard policies (docs/decisions.md) on a
# request log, each replica modelled by tokens (docs/simulator.md).
# Edit it, then: gpuscale simulate FILE --out DIR
name: requests
description: the standard policies on a request log
durationSeconds: {plan.duration}
cluster:
  hpaSyncPeriodSeconds: 15
workload:
  name: vllm
  replicaModel: tokens
  tokens: {{preset: {preset}}}
  # requests/s a saturated replica finishes of the log's mean request: the oracle's and the targets' unit
  capacityPerReplica: {plan.capacity:g}
  gpusPerReplica: {plan.gpus}
  provisioningSeconds: 30        # scheduling + image pull on a warm node
  loadSeconds: 90                # weights + CUDA graphs (cached)
  initialReplicas: {plan.initial}
  maxQueueSeconds: 60            # ingress-nginx's proxy-read-timeout
demand:
  shape: requests
  file: {json.dumps(file)}
  format: {log.format}
{scales}policies:
{_policies(plan, profile)}"""
