"""What KEDA and the HPA do, in one process, over the real protocols: the demo's autoscaler.

* **KEDA's operator**: every ``polling_interval`` it calls the scaler's ``GetMetricSpec``, then
  ``GetMetrics`` and ``IsActive`` (KEDA's order), and applies ``RequestScale`` (``gpuscale.sim.keda``:
  activation 0 → 1, the drop to zero after ``cooldownPeriod``). It keeps a ``StreamIsActive`` stream open (an
  ``external-push`` trigger): ``true`` scales from zero at once, ``false`` is ignored (KEDA ≥ 2.18), and a
  closed stream is reopened after 2 s, doubling to 1 min.
* **The HPA** KEDA creates (``hpa_for``): every ``sync_period`` it reads the Deployment's ``/scale`` and pods
  from the API, fetches the metric the way KEDA's metrics server does (``GetMetricSpec``, ``GetMetrics``,
  ``IsActive``), and runs the controller's sync (``gpuscale.sim.controller.reconcile``: External
  ``AverageValue`` → ``ceil(value / target)`` with tolerance, stabilization, rate policies), then writes
  ``/scale``. Its rate policies are the ScaledObject's ``advanced.horizontalPodAutoscalerConfig.behavior``
  (``hpa_behavior``: the scale-up ``gpuscale render`` writes for the trigger, so for a demand trigger one
  sync reaches the asked count; the demo's shortened scale-down). At zero replicas with
  ``minReplicaCount: 0`` the HPA reads nothing (``ScalingDisabled``): KEDA's activation takes it to 1, and the
  HPA's next sync to what the scaler asks.

After each ``GetMetrics`` the controller asks the scaler's ``/explain`` how it decided, and with a request
path what the path's demand is; each replica change is recorded with them (``ReplicaChange``).

An optional ``wake`` trigger stands for a request-rate trigger (a gateway's queue, through a ``prometheus``
trigger): the signal that exists at zero replicas, which a workload-scope GPU trigger cannot have. A
trigger with a ``requestPath`` needs none: the scaler reads the gateway itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import grpc
import grpc.aio

from .._proto import externalscaler_pb2 as pb
from .._proto import externalscaler_pb2_grpc as pb_grpc
from ..render.behavior import choose
from ..scaler.wire import scaled_object_ref
from ..scaling.decisions import Decision
from ..sim.controller import reconcile
from ..sim.hpa import (
    Behavior,
    ControllerConfig,
    ExternalReading,
    HpaState,
    MetricReading,
    PodInfo,
    ScaleTarget,
    ScalingPolicy,
    ScalingRules,
    default_behavior_rules,
)
from ..sim.keda import KedaState, ScaledObjectSpec, TriggerSpec, hpa_for, request_scale
from ..sim.quantity import keda_milli

__all__ = ["ControllerSettings", "ControllerStatus", "DemoController", "ReplicaChange", "hpa_behavior"]

log = logging.getLogger(__name__)


def hpa_behavior(max_replicas: int, scale_down_window: int, *, demand: bool) -> dict[str, Any]:
    """The demo ScaledObject's ``horizontalPodAutoscalerConfig.behavior``: the ``scaleUp`` ``gpuscale render``
    writes for the trigger (a ``demand`` trigger, an engine signal or a request path: +900 % or
    ``max_replicas`` pods per 15 s, ``selectPolicy: Max``, so one sync reaches the asked count; otherwise
    none, the HPA's default), and a ``scaleDown`` shortened for a one-minute demo: ``scale_down_window``,
    then 100 % per 15 s (render writes its window, then 1 pod per 60 s)."""
    behavior = choose(None, scale_down_window, max_replicas=max_replicas, demand=demand).spec()
    behavior["scaleDown"] = {
        "stabilizationWindowSeconds": scale_down_window,
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    }
    return behavior


def _parsed_behavior(raw: Mapping[str, Any]) -> Behavior:
    """``behavior`` (as ``hpa_behavior`` writes it) as the HPA's API defaults it: a direction not written is
    the default rules; a field not written, the default's."""

    def rules(direction: Literal["up", "down"], given: Mapping[str, Any] | None) -> ScalingRules:
        base = default_behavior_rules(direction)
        if given is None:
            return base
        policies = base.policies
        if "policies" in given:
            policies = tuple(
                ScalingPolicy(p["type"], int(p["value"]), int(p["periodSeconds"])) for p in given["policies"]
            )
        return ScalingRules(
            given.get("stabilizationWindowSeconds", base.stabilization_window_seconds),
            given.get("selectPolicy", base.select_policy),
            policies,
        )

    return Behavior(rules("up", raw.get("scaleUp")), rules("down", raw.get("scaleDown")))


@dataclass(frozen=True)
class ControllerSettings:
    """The ScaledObject's and the kube-controller-manager's settings, shortened for a one-minute demo
    (upstream defaults: ``pollingInterval`` 30 s, HPA sync 15 s, scale-down stabilization 300 s,
    ``cooldownPeriod`` 300 s)."""

    scaler_address: str
    api_url: str
    token: str
    namespace: str
    scaled_object: str
    workload: str
    metadata: Mapping[str, str]
    polling_interval: int = 5
    sync_period: int = 5
    cooldown_period: int = 10
    scale_down_window: int = 10
    min_replicas: int = 1
    max_replicas: int = 6
    wake_target: float | None = (
        None  # requests/s per replica of the request-rate trigger; None: no such trigger
    )
    call_timeout_s: float = 3.0
    # the scaler's GET /explain (its --metrics-address): after each GetMetrics the controller asks how the
    # scaler decided (scaling.answer's "ahead 4 s", "KV-cache guard", …); None: not asked
    explain_url: str | None = None
    # the ScaledObject's horizontalPodAutoscalerConfig.behavior (hpa_behavior); None: hpa_behavior for a
    # trigger that is no demand signal
    behavior: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ReplicaChange:
    """One write to ``/scale``: at ``t`` (the demo's seconds), ``old`` → ``new``, by ``KEDA`` or the
    ``HPA``, why; how the scaler had decided its last answer (``decided``), the request path's demand then
    (requests/s, NaN: none or not read) and, for the HPA, the replicas its metric asked for (``asked``)."""

    t: float
    old: int
    new: int
    by: str
    why: str
    decided: str = ""
    path_demand: float = math.nan
    asked: int | None = None
    decision: str = ""  # which decision that was (``Decision``'s words: "request path"; "" none)


@dataclass
class ControllerStatus:
    """What the view shows: the last answers and decisions."""

    metric_name: str = ""
    target: float = float("nan")
    value: float = float("nan")  # the scaler's last GetMetrics value
    active: bool | None = None  # the last IsActive
    stream_active: bool | None = None  # the last StreamIsActive message
    stream_messages: int = 0
    spec_replicas: int = 0
    status_replicas: int = 0
    ready_replicas: int = 0
    metric_replicas: int | None = None
    last_sync: str = ""
    last_poll: str = ""
    last_error: str = ""
    decided: str = ""  # how the scaler's last answer was decided ("" the plain value; /explain)
    decision: str = ""  # which decision that was (its /explain "decision": "request path"; "" none)
    decisions: dict[str, int] = field(default_factory=dict)  # every decision seen, with its count
    # the request path as the scaler's /explain last said it (NaN: none, or not read yet)
    path_demand: float = math.nan  # requests/s: arrivals/s + held / requestPathDrainSeconds
    path_rate: float = math.nan  # arrivals/s
    path_held: float = math.nan
    replica_rate: float | None = None  # the trigger's replicaRate
    events: list[str] = field(default_factory=list)  # every replica change, oldest first, as printed
    changes: list[ReplicaChange] = field(default_factory=list)

    def event(self, t: float, text: str) -> None:
        self.events.append(f"t={t:4.1f}s replicas {text}")

    def record(self, change: ReplicaChange) -> None:
        self.changes.append(change)
        self.event(change.t, f"{change.old} → {change.new}: {change.by}: {change.why}{_said(change, self)}")


def _said(change: ReplicaChange, status: ControllerStatus) -> str:
    """What the scaler said of the request path at a replica change, for its line ('' when nothing)."""
    if math.isnan(change.path_demand):
        return ""
    if change.by == "HPA" and change.decision == Decision.REQUEST_PATH.value and change.asked is not None:
        rate = f" ÷ replicaRate {status.replica_rate:g} req/s" if status.replica_rate else ""
        return f"; the scaler asked for {change.asked} ({change.decided}{rate})"
    if change.old == 0:
        held = "" if math.isnan(status.path_held) else f", {status.path_held:.0f} held at the gateway"
        return f"; request path {change.path_demand:.1f} req/s{held}"
    return ""


class DemoController:
    """``run`` until cancelled. ``clock``: the demo's time in seconds; ``demand``: the request rate now."""

    def __init__(
        self, settings: ControllerSettings, clock: Callable[[], float], demand: Callable[[], float]
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.demand = demand
        self.status = ControllerStatus()
        self.config = ControllerConfig(
            sync_period_seconds=settings.sync_period,
            downscale_stabilization_seconds=settings.scale_down_window,
        )
        raw = settings.behavior
        if raw is None:
            raw = hpa_behavior(settings.max_replicas, settings.scale_down_window, demand=False)
        self.behavior = _parsed_behavior(raw)
        self.hpa_state = HpaState()
        self.keda_state = KedaState(last_active_time=0, created_at=0)
        self.so: ScaledObjectSpec | None = None
        self._lock = asyncio.Lock()
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.ExternalScalerAsyncStub | None = None
        self._http: aiohttp.ClientSession | None = None

    @property
    def ref(self) -> pb.ScaledObjectRef:
        s = self.settings
        return scaled_object_ref(s.scaled_object, s.namespace, s.metadata)

    def _now(self) -> int:
        return int(self.clock())

    # ----- the ScaledObject and the HPA KEDA makes of it
    def _scaled_object(self, target: float) -> ScaledObjectSpec:
        s = self.settings
        triggers = [TriggerSpec("gpuscale", "external-push", "AverageValue", target, 0.0, "scaler")]
        if s.wake_target is not None:
            triggers.append(
                TriggerSpec("requests", "prometheus", "AverageValue", s.wake_target, 0.0, "demand")
            )
        return ScaledObjectSpec(
            triggers=tuple(triggers),
            polling_interval=s.polling_interval,
            cooldown_period=s.cooldown_period,
            min_replica_count=s.min_replicas,
            max_replica_count=s.max_replicas,
            behavior=self.behavior,
        )

    # ----- calls
    async def _spec(self) -> pb.GetMetricSpecResponse:
        assert self._stub is not None
        return await self._stub.GetMetricSpec(self.ref, timeout=self.settings.call_timeout_s)

    async def _metrics_and_activity(self) -> tuple[float | None, bool | None]:
        """KEDA's ``GetMetricsAndActivity``: GetMetricSpec, GetMetrics (its name), IsActive; None: failed."""
        assert self._stub is not None
        timeout = self.settings.call_timeout_s
        try:
            spec = await self._spec()
            name = spec.metricSpecs[0].metricName if spec.metricSpecs else ""
            request = pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=name)
            values = await self._stub.GetMetrics(request, timeout=timeout)
            value = 0.0
            for v in values.metricValues:  # KEDA: the float wins when > 0; the HPA sums the series
                value += v.metricValueFloat if v.metricValueFloat > 0 else float(v.metricValue)
            active = (await self._stub.IsActive(self.ref, timeout=timeout)).result
        except grpc.aio.AioRpcError as e:
            self.status.last_error = f"{e.code().name}: {e.details()}"
            return None, None
        self.status.value, self.status.active, self.status.last_error = value, active, ""
        await self._explain()
        return value, active

    async def _explain(self) -> None:
        """How the scaler decided its last answer, from its ``/explain`` (best effort: on failure, unsaid)."""
        s = self.settings
        if s.explain_url is None or self._http is None:
            return
        params = [("name", s.scaled_object), ("namespace", s.namespace)]
        params += [("m", f"{k}={v}") for k, v in s.metadata.items() if k != "scalerAddress"]
        try:
            timeout = aiohttp.ClientTimeout(total=s.call_timeout_s)
            async with self._http.get(s.explain_url, params=params, timeout=timeout) as response:
                body = await response.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return
        if not isinstance(body, dict):
            return
        st = self.status
        answer = body.get("answer")
        decided = answer.get("decided", "") if isinstance(answer, dict) else ""
        decision = answer.get("decision") if isinstance(answer, dict) else None
        st.decided = decided if isinstance(decided, str) else ""
        st.decision = decision if isinstance(decision, str) else ""
        if st.decision:
            st.decisions[st.decision] = st.decisions.get(st.decision, 0) + 1
        path = body.get("requestPath")
        if isinstance(path, dict):
            st.path_demand, st.path_rate, st.path_held = (
                _number(path.get("demand")),
                _number(path.get("rate")),
                _number(path.get("held")),
            )
        metadata = body.get("metadata")
        rate = metadata.get("replicaRate") if isinstance(metadata, dict) else None
        st.replica_rate = (
            float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool) else None
        )

    async def _api(self, method: str, path: str, body: Any = None) -> Any:
        assert self._http is not None
        headers = {"Authorization": f"Bearer {self.settings.token}"}
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        async with self._http.request(
            method, self.settings.api_url + path, json=body, headers=headers
        ) as response:
            response.raise_for_status()
            return await response.json()

    @property
    def _scale_path(self) -> str:
        s = self.settings
        return f"/apis/apps/v1/namespaces/{s.namespace}/deployments/{s.workload}/scale"

    async def _read_target(self) -> tuple[ScaleTarget, str]:
        scale = await self._api("GET", self._scale_path)
        selector = scale["status"].get("selector", "")
        pods = await self._api(
            "GET", f"/api/v1/namespaces/{self.settings.namespace}/pods?labelSelector={selector}"
        )
        infos = []
        for p in pods["items"]:
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p["status"].get("conditions", ())
            )
            running = p["status"]["phase"] == "Running"
            infos.append(PodInfo(p["metadata"]["name"], "Running" if running else "Pending", ready))
        target = ScaleTarget(scale["spec"]["replicas"], scale["status"]["replicas"], tuple(infos))
        st = self.status
        st.spec_replicas, st.status_replicas = target.spec_replicas, target.status_replicas
        st.ready_replicas = sum(1 for i in infos if i.ready and i.phase == "Running")
        return target, selector

    async def _write_replicas(self, replicas: int, by: str, why: str, asked: int | None = None) -> None:
        await self._api("PATCH", self._scale_path, {"spec": {"replicas": replicas}})
        st = self.status
        old, st.spec_replicas = st.spec_replicas, replicas
        st.record(
            ReplicaChange(
                self.clock(), old, replicas, by, why, st.decided, st.path_demand, asked, decision=st.decision
            )
        )
        log.debug("replicas %d -> %d: %s: %s", old, replicas, by, why)

    # ----- the loops
    async def _keda_poll(self) -> None:
        assert self.so is not None
        value, active = await self._metrics_and_activity()
        error = value is None
        any_active = bool(active)
        if self.settings.wake_target is not None and self.demand() > 0:
            any_active = True  # the request-rate trigger: requests are waiting
        async with self._lock:
            target, _ = await self._read_target()
            decision = request_scale(
                self.so, self.keda_state, target.spec_replicas, any_active, error, self._now()
            )
            self.keda_state = decision.state
            self.status.last_poll = decision.reason
            if decision.replicas is not None and decision.replicas != target.spec_replicas:
                await self._write_replicas(decision.replicas, "KEDA", decision.reason)

    async def _hpa_sync(self) -> None:
        assert self.so is not None
        hpa = hpa_for(self.so)
        async with self._lock:
            target, _ = await self._read_target()
            readings: list[MetricReading] = [None] * len(hpa.metrics)
            if not (target.spec_replicas == 0 and hpa.min_replicas != 0):  # ScalingDisabled reads nothing
                value, _ = await self._metrics_and_activity()
                readings[0] = ExternalReading((keda_milli(value),)) if value is not None else None
                if len(readings) > 1:
                    readings[1] = ExternalReading((keda_milli(self.demand()),))
            result = reconcile(hpa, self.config, self.hpa_state, target, tuple(readings), self._now())
            self.hpa_state = result.state
            self.status.metric_replicas = result.metric_replicas
            self.status.last_sync = result.reason
            if result.rescale:
                await self._write_replicas(result.desired, "HPA", result.reason, result.metric_replicas)

    async def _stream(self) -> None:
        """``StreamIsActive`` as KEDA's push scaler runs it: reopen after 2 s doubling to 60 s."""
        assert self._stub is not None and self.so is not None
        backoff = 2.0
        while True:
            try:
                async for message in self._stub.StreamIsActive(self.ref):
                    self.status.stream_active = message.result
                    self.status.stream_messages += 1
                    if not message.result:
                        continue  # KEDA >= 2.18 ignores false; scale-in comes from polling
                    async with self._lock:
                        target, _ = await self._read_target()
                        decision = request_scale(
                            self.so, self.keda_state, target.spec_replicas, True, False, self._now()
                        )
                        self.keda_state = decision.state
                        if decision.replicas is not None and decision.replicas != target.spec_replicas:
                            # what woke it, as the HPA will read it (the value, and the request path's
                            # demand from /explain): for the demo's lines, not a call KEDA makes on a push
                            await self._metrics_and_activity()
                            await self._write_replicas(decision.replicas, "KEDA", "StreamIsActive true")
                backoff = 2.0
            except grpc.aio.AioRpcError as e:
                log.debug("StreamIsActive ended: %s", e.code().name)
                backoff = min(backoff * 2, 60.0)
            await asyncio.sleep(backoff)

    async def _every(self, period: int, offset: float, step: Callable[[], Any]) -> None:
        next_at = offset
        while True:
            await asyncio.sleep(max(0.0, next_at - self.clock()))
            try:
                await step()
            except (aiohttp.ClientError, grpc.aio.AioRpcError, OSError) as e:
                self.status.last_error = str(e)
                log.warning("%s failed: %s", getattr(step, "__name__", "step"), e)
            next_at += period

    async def wait_for_metrics(self, timeout_s: float, *, positive: bool) -> bool:
        """Until the scaler answers ``GetMetrics`` for the workload (with ``positive``: a value above 0, i.e.
        the agents report the pods' busy GPUs). Raises ``TimeoutError`` naming the last answer."""
        deadline = time.monotonic() + timeout_s
        while True:
            value, _ = await self._metrics_and_activity()
            if value is not None and (value > 0 or not positive):
                return True
            if time.monotonic() > deadline:
                last = self.status.last_error or f"GetMetrics answered {value}"
                raise TimeoutError(f"the scaler did not report the workload within {timeout_s:g} s ({last})")
            await asyncio.sleep(0.2)

    async def open(self) -> None:
        self._channel = grpc.aio.insecure_channel(self.settings.scaler_address)
        self._stub = pb_grpc.ExternalScalerStub(self._channel)
        self._http = aiohttp.ClientSession()
        spec = await self._spec()  # the ScaledObject reconcile: the HPA is built from the spec
        self.status.metric_name = spec.metricSpecs[0].metricName
        first = spec.metricSpecs[0]
        self.status.target = first.targetSizeFloat if first.targetSizeFloat > 0 else float(first.targetSize)
        self.so = self._scaled_object(self.status.target)

    async def run(self) -> None:
        """The KEDA poll (offset 0), the HPA sync (offset 1 s) and the stream, until cancelled."""
        s = self.settings
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._every(s.polling_interval, 0.0, self._keda_poll))
            tg.create_task(self._every(s.sync_period, 1.0, self._hpa_sync))
            tg.create_task(self._stream())

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()


def _number(value: object) -> float:
    """A number of ``/explain``'s JSON, NaN where it is none."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return math.nan
