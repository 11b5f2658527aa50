"""``externalscaler.ExternalScaler``: KEDA's four calls, answered from memory.

Per call: parse the trigger metadata (cached) → decide which GPUs it means (a ``Query``; in workload scope the
ScaledObject's pods are found by its ``podSelector``, else by its target's ``/scale`` selector, the way the
HPA finds them) → select them from the ``GpuSource`` → ``evaluate``.

Failure semantics (``status.py`` maps errors to codes):

* invalid metadata: ``INVALID_ARGUMENT`` with the ``MetadataError`` message, on every call (a
  ``requestPath`` of another namespace than the ScaledObject's, not allowed by the scaler, too);
* ``GetMetricSpec`` answers from the metadata alone, so KEDA's fallback keeps working;
* no agent data yet, or no fresh sample for the GPUs in scope: ``UNAVAILABLE`` from ``GetMetrics`` and
  ``IsActive`` (never a made-up 0); a workload with no pods on GPU nodes reports 0 and inactive, one whose
  pods run there but hold no GPU the agents can name is ``UNAVAILABLE`` too;
* an unexpected exception is logged and answered ``INTERNAL`` for that call only.

Loading and cold start (workload scope): each GPU pod's readiness is its agent's report, or the API's list
where the agent cannot say (an older agent, or its node's agent gone: the API's view is then the fresher);
every pod seen Ready (from the agents and the list) is one observation of the ScaledObject's cold start
(``scaling.coldstart.ColdStarts``, keyed ``namespace/ScaledObject``), which the answer is given
(``cold_start``) and ``gpuscale_workload_cold_start_seconds`` exports.

``StreamIsActive`` sends the current activity at once, then each change, evaluated on every agent update that
touches the trigger's GPUs (or which GPUs are in scope) and on every reading of its ``requestPath`` (at zero
replicas no GPU sample moves; ``requestpath.RequestPaths``). While there is no data it sends nothing and keeps
the stream open; only invalid metadata and permanent lookup failures end it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import grpc
import grpc.aio

from .._proto import externalscaler_pb2 as pb
from .._proto import externalscaler_pb2_grpc as pb_grpc
from ..scaling.aggregate import Evaluation
from ..scaling.answer import answer
from ..scaling.capacity import Capacities, saturated_rate
from ..scaling.coldstart import ColdStarts
from ..scaling.errors import MissingPods
from ..scaling.keys import ENGINE_METRICS
from ..scaling.metadata import MetadataCache, TriggerMetadata, metric_name, target
from ..scaling.requestpath import RequestPath, demand
from ..scaling.selector import LabelSelector, parse_selector
from ..scaling.view import GpuPod, ListedPod, WorkloadView, learn_cold_starts, merge_listed_pods
from .errors import MetadataError, SelectorError
from .explain import explain
from .metrics import ScalerMetrics
from .requestpath import RequestPaths, either
from .source import ChangeFeed, GpuSource, Query, Selection
from .status import (
    EmptyPool,
    NotReady,
    NoWorkloadSelector,
    RequestPathNeedsApi,
    ScopeNotServed,
    status_code,
)
from .wire import (
    ScaledObjectKey,
    check_ref,
    is_active_response,
    metric_spec_response,
    metric_value_response,
    scaled_object_key,
)

__all__ = ["SERVICE_NAME", "ExternalScalerService", "SelectorResolver", "add_external_scaler"]

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name
_T = TypeVar("_T")
_Context = grpc.aio.ServicerContext[object, object]
_WAIT_CODES = (grpc.StatusCode.UNAVAILABLE,)
_MAX_SELECTORS = 4096
_MISSING_LOG_EVERY_S = 60.0
# The status message travels percent-encoded in a trailer (up to 3 bytes per byte); gRPC clients drop a call
# whose trailers pass 8-16 KiB (RESOURCE_EXHAUSTED "received metadata size exceeds hard limit").
_MAX_DETAILS_BYTES = 2000


class SelectorResolver(Protocol):
    """``kube.workloads.WorkloadResolver``: a ScaledObject → its target's pod selector."""

    async def selector(self, namespace: str, name: str) -> str: ...


class PodLister(Protocol):
    """``kube.workload_pods.WorkloadPodLister``: a workload's GPU pods as the Kubernetes API lists them."""

    def cached(self, namespace: str, selector: str) -> Sequence[ListedPod] | None: ...

    def replicas(self, namespace: str, selector: str) -> int | None: ...

    async def refresh(self, namespace: str, selector: str) -> None: ...


class ExternalScalerService(pb_grpc.ExternalScalerServicer):
    def __init__(
        self,
        source: GpuSource,
        *,
        metadata: MetadataCache | None = None,
        resolver: SelectorResolver | None = None,
        metrics: ScalerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        view_problem: Callable[[], str | None] | None = None,
        pods: PodLister | None = None,
        cold_starts: ColdStarts | None = None,
        request_paths: RequestPaths | None = None,
    ) -> None:
        self.source = source
        self.request_paths = request_paths
        self.pods = pods
        self.cold_starts = cold_starts or ColdStarts()
        self.capacities = Capacities()
        # per ScaledObject, the agents' and the list's pods last learned from (skipped while unchanged)
        self._learned: dict[str, tuple[object, object]] = {}
        self._view_problem = view_problem
        self.metadata = metadata or MetadataCache()
        self.resolver = resolver
        self.metrics = metrics
        self._clock = clock
        self._selectors: dict[str, LabelSelector] = {}
        self._missing_logged: dict[tuple[str, str, str], float] = {}  # (namespace, name, metric)

    # -- the four calls --------------------------------------------------------------------------------
    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: _Context) -> pb.GetMetricSpecResponse:
        async def answer() -> pb.GetMetricSpecResponse:
            md = self._parse(scaled_object_key(request))
            return metric_spec_response(metric_name(md), target(md))

        return await self._unary("GetMetricSpec", context, answer)

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: _Context) -> pb.GetMetricsResponse:
        async def answer() -> pb.GetMetricsResponse:
            key = scaled_object_key(request.scaledObjectRef)
            md = self._parse(key)
            try:
                result = self.evaluate(md, await self.query(key, md), key=key)
            except Exception as e:
                if self.metrics is not None and key.name:
                    code = status_code(e).value[0]
                    self.metrics.set_trigger(key.namespace, key.name, code, target(md), None)
                raise
            if self.metrics is not None and key.name:
                self.metrics.set_trigger(key.namespace, key.name, 0, target(md), result.value)
                self.metrics.count_decision(key.namespace, key.name, result.decision)
            return metric_value_response(request.metricName or metric_name(md), result.value)

        return await self._unary("GetMetrics", context, answer)

    async def IsActive(self, request: pb.ScaledObjectRef, context: _Context) -> pb.IsActiveResponse:
        async def answer() -> pb.IsActiveResponse:
            key = scaled_object_key(request)
            md = self._parse(key)
            return is_active_response(self.evaluate(md, await self.query(key, md), key=key).active)

        return await self._unary("IsActive", context, answer)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: _Context
    ) -> AsyncIterator[pb.IsActiveResponse]:
        method = "StreamIsActive"
        code = grpc.StatusCode.OK
        feed: ChangeFeed | None = None
        if self.metrics is not None:
            self.metrics.streams.inc()
        try:
            key = scaled_object_key(request)
            last: bool | None = None
            md: TriggerMetadata | None = None
            query: Query | None = None
            while True:
                try:
                    md = md or self._parse(key)
                    fresh = await self.query(key, md)
                    if fresh != query or feed is None:
                        if feed is not None:
                            feed.close()
                        query, feed = fresh, self.source.feed(fresh)
                    active: bool | None = self.evaluate(md, query, feed, key).active
                except Exception as e:
                    if status_code(e) not in _WAIT_CODES:
                        raise
                    log.debug("StreamIsActive %s/%s: waiting for data (%s)", key.namespace, key.name, e)
                    active = None
                if active is not None and active != last:
                    last = active
                    if self.metrics is not None:
                        self.metrics.stream_messages.inc()
                    yield is_active_response(active)
                if feed is None:  # no query yet (data or the API missing): look again shortly
                    feed = _Retry()
                if md is not None and md.request_path is not None and self.request_paths is not None:
                    # at zero replicas no GPU sample moves: the request path's next reading wakes it too
                    await either(feed.wait(), self.request_paths.wait(key.namespace, md))
                else:
                    await feed.wait()
        except Exception as e:
            code = status_code(e)
            await self._abort(method, context, code, e)
        finally:
            if feed is not None:
                feed.close()
            if self.metrics is not None:
                self.metrics.streams.dec()
                self.metrics.requests.labels(method, code.name).inc()

    # -- the steps -------------------------------------------------------------------------------------
    def _parse(self, key: ScaledObjectKey) -> TriggerMetadata:
        md = self.metadata.parse(key.metadata)
        problem = self.source.scope_problem(md.scope)
        if problem is not None:
            raise ScopeNotServed(problem)
        if md.request_path is not None and self.request_paths is not None:
            self.request_paths.key(key.namespace, md, key.metadata.get("requestPath"))  # where it may point
        return md

    async def query(self, key: ScaledObjectKey, md: TriggerMetadata) -> Query:
        """The GPUs ``md`` means for ScaledObject ``key``."""
        if md.scope == "pool":
            return Query("pool", node_selector=md.node_selector)
        if md.scope == "node":
            return Query("node")
        namespace = md.namespace or key.namespace
        if not namespace:
            raise MetadataError(
                ('the ScaledObjectRef has no namespace and parameter "namespace" is not set; give one',)
            )
        check_ref(key)
        selector = md.pod_selector
        if selector is None:
            if self.resolver is None:
                raise NoWorkloadSelector(
                    f"ScaledObject {key.namespace}/{key.name}: workload scope without podSelector needs the "
                    "Kubernetes API (start the scaler with --kubeconfig or in a cluster), or set podSelector "
                    "in the trigger metadata"
                )
            selector = self._selector(key, await self.resolver.selector(key.namespace, key.name))
        if self.pods is not None:
            await self.pods.refresh(namespace, str(selector))
        return Query("workload", namespace, selector)

    def evaluate(
        self,
        md: TriggerMetadata,
        query: Query,
        feed: ChangeFeed | None = None,
        key: ScaledObjectKey | None = None,
    ) -> Evaluation:
        """Evaluate ``md`` over the GPUs of ``query`` now; raise ``NoDataError``/``NotReady`` without data."""
        problem = self.source.problem()
        if problem is None and self._view_problem is not None:
            problem = self._view_problem()
            if problem is not None:
                problem = f"the scaler's view of the cluster is not complete yet: {problem}"
        if problem is not None:
            raise NotReady(problem)
        selection = self.source.select(query)
        if feed is not None:
            feed.follow(selection.uuids)
        if query.scope == "pool" and not selection.series:
            raise EmptyPool(query.node_selector, self.source.node_count())
        where = f"ScaledObject {key.namespace}/{key.name}" if key is not None else "the workload"
        gpu_pods, replicas = self._gpu_pods(query, selection)
        cold_start = self._learn(key, query, selection)
        now = self._clock()
        path = self._request_path(key, md, query, now)
        capacity = self._capacity(key, md, query, gpu_pods, selection, now)
        view = WorkloadView(
            selection.series, gpu_pods, selection.engines, replicas, cold_start, capacity, path, where
        )
        try:
            result = answer(md, view, now)
        except MissingPods as e:
            self._note_missing(key, md.metric, e.missing, str(e))
            raise
        if query.scope == "workload":
            self._note_missing(key, md.metric, result.missing, ", ".join(result.missing_where))
        return result

    def _capacity(
        self,
        key: ScaledObjectKey | None,
        md: TriggerMetadata,
        query: Query,
        gpu_pods: Sequence[GpuPod],
        selection: Selection,
        now: float,
    ) -> float | None:
        """An engine-metric ScaledObject's replica capacity: one more observation while requests wait on
        its Ready pods (``scaling.capacity``), and what is learned (``None``: nothing yet)."""
        if key is None or not key.name or query.scope != "workload" or md.metric not in ENGINE_METRICS:
            return None
        name = f"{key.namespace}/{key.name}"
        ready = frozenset(p.name for p in gpu_pods if p.ready is not False)
        rate = saturated_rate(md, selection.engines, ready, now) if self.capacities.due(name, now) else None
        if rate is not None:
            self.capacities.observe(name, now, rate)
        learned = self.capacities.rate(name)
        if learned is not None and self.metrics is not None:
            self.metrics.set_capacity(key.namespace, key.name, learned)
        return learned

    def _request_path(
        self, key: ScaledObjectKey | None, md: TriggerMetadata, query: Query, now: float
    ) -> RequestPath | None:
        """What is held of the trigger's request path (``None``: none, or not workload scope), from memory;
        its demand exported per ScaledObject. ``FAILED_PRECONDITION`` without the Kubernetes API."""
        if md.request_path is None or query.scope != "workload":
            return None
        if self.request_paths is None:
            raise RequestPathNeedsApi(
                f'parameter "requestPath" value "{md.request_path}": the request path is a Service, found '
                "through the Kubernetes API, and this server has none"
            )
        namespace = key.namespace if key is not None else query.namespace or ""
        written = key.metadata.get("requestPath") if key is not None else None
        path = self.request_paths.path(namespace, md, written)
        if key is not None and key.name and self.metrics is not None:
            pd = demand(path, now, md.request_path_drain_seconds)
            self.metrics.set_path_demand(key.namespace, key.name, None if pd is None else pd.demand)
        return path

    async def explain(self, key: ScaledObjectKey) -> dict[str, object]:
        """What a ScaledObject resolved to and how its answer came about, for people (``query --explain``):
        ``scaler.explain.explain``."""
        return await explain(self, key)

    def _gpu_pods(self, query: Query, selection: Selection) -> tuple[tuple[GpuPod, ...], int | None]:
        """The workload's GPU pods as the answer counts them, and its replica count when the API tells it
        (``None``: not known, or not workload scope)."""
        if query.scope != "workload" or self.pods is None:
            return selection.gpu_pods, None
        selector = str(query.pod_selector or "")
        replicas = self.pods.replicas(query.namespace or "", selector)
        return self._with_api_pods(query, selection.gpu_pods), replicas

    def _listed(self, query: Query) -> Sequence[ListedPod] | None:
        """The workload's GPU pods as the API's last list has them (``None``: no list, or not workload
        scope)."""
        if query.scope != "workload" or self.pods is None:
            return None
        return self.pods.cached(query.namespace or "", str(query.pod_selector or ""))

    def _with_api_pods(self, query: Query, known: tuple[GpuPod, ...]) -> tuple[GpuPod, ...]:
        """The workload's GPU pods, the agents' merged with the API's last list
        (``view.merge_listed_pods``)."""
        return merge_listed_pods(known, self._listed(query), self.source.follows)

    def _learn(self, key: ScaledObjectKey | None, query: Query, selection: Selection) -> float | None:
        """Count the cold start of each of the workload's GPU pods seen Ready (by its agent, or in the API's
        list; once per Ready transition) for ScaledObject ``key``, and return what it has learned: seconds
        from scheduled to Ready (``None``: no pod seen Ready yet, or not a ScaledObject's workload)."""
        if key is None or not key.name or query.scope != "workload":
            return None
        name = f"{key.namespace}/{key.name}"
        listed = self._listed(query)
        seen = (selection.started, listed)
        last = self._learned.get(name)
        if last is None or last[0] is not seen[0] or last[1] is not seen[1]:  # new reports: learn from them
            learn_cold_starts(self.cold_starts, name, selection.started, listed or ())
            if len(self._learned) >= _MAX_SELECTORS and name not in self._learned:
                self._learned.clear()
            self._learned[name] = seen
        seconds = self.cold_starts.seconds(name)
        if seconds is not None and self.metrics is not None:
            self.metrics.set_cold_start(key.namespace, key.name, seconds)
        return seconds

    def _note_missing(self, key: ScaledObjectKey | None, metric: str, missing: int, why: str) -> None:
        """The missing-pods gauge, and a warning naming where and why, at most once a minute per object."""
        if key is None:
            return
        if self.metrics is not None:
            self.metrics.set_missing(key.namespace, key.name, missing)
        if not missing:
            self._missing_logged.pop((key.namespace, key.name, metric), None)
            return
        now = time.monotonic()
        last = self._missing_logged.get((key.namespace, key.name, metric))
        if last is None or now - last >= _MISSING_LOG_EVERY_S:
            self._missing_logged[(key.namespace, key.name, metric)] = now
            if len(self._missing_logged) > _MAX_SELECTORS:
                self._missing_logged.clear()
            log.warning(
                "ScaledObject %s/%s (metric %s): %d GPU pods without a fresh sample%s; answering as the HPA "
                "counts pods without metrics (never a scale-down because data is missing)",
                key.namespace,
                key.name,
                metric,
                missing,
                f" ({why})" if why else "",
            )

    def _selector(self, key: ScaledObjectKey, text: str) -> LabelSelector:
        selector = self._selectors.get(text)
        if selector is None:
            try:
                selector = parse_selector(text)
            except SelectorError as e:
                raise NoWorkloadSelector(
                    f"ScaledObject {key.namespace}/{key.name}: its target's selector cannot be used ({e}); "
                    "set podSelector in the trigger metadata"
                ) from e
            if len(self._selectors) >= _MAX_SELECTORS:
                self._selectors.clear()
            self._selectors[text] = selector
        return selector

    # -- error handling and accounting, in one place ----------------------------------------------------
    async def _unary(self, method: str, context: _Context, answer: Callable[[], Awaitable[_T]]) -> _T:
        start = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            return await answer()
        except Exception as e:
            code = status_code(e)
            await self._abort(method, context, code, e)
            raise AssertionError("abort raises") from None
        finally:
            if self.metrics is not None:
                self.metrics.answered(method, code.name, time.perf_counter() - start)

    @staticmethod
    async def _abort(method: str, context: _Context, code: grpc.StatusCode, e: Exception) -> None:
        if code is grpc.StatusCode.INTERNAL:
            log.error("%s failed unexpectedly; answering INTERNAL", method, exc_info=e)
            await context.abort(code, _details(f"internal error in {method}: {type(e).__name__}: {e}"))
        log.debug("%s: %s: %s", method, code.name, e)
        await context.abort(code, _details(str(e)))


def _details(text: str) -> str:
    """``text``, shortened to fit a status trailer."""
    raw = text.encode()
    if len(raw) <= _MAX_DETAILS_BYTES:
        return text
    kept = raw[: _MAX_DETAILS_BYTES - 50].decode(errors="ignore")
    return f"{kept} ... ({len(text) - len(kept)} more characters)"


class _Retry:
    """A feed for a stream that has no query yet: wakes after a short pause."""

    def follow(self, uuids: frozenset[str]) -> None:
        pass

    async def wait(self) -> None:
        await asyncio.sleep(1.0)

    def close(self) -> None:
        pass


def add_external_scaler(server: grpc.aio.Server, service: ExternalScalerService) -> None:
    pb_grpc.add_ExternalScalerServicer_to_server(service, server)
