"""``gpuscale_scaler_*`` Prometheus metrics, on a registry the caller owns (never the global one)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..scaling.decisions import Decision

__all__ = ["DECISIONS", "PATH_RESULTS", "ScalerMetrics"]

# The ``decision`` label's values: one per ``scaling.decisions.Decision`` (its lower-cased name: ahead,
# n_minus_1_guard, kv_cache_guard, backlog_hold, all_pods_loading, uncapped, capacity, request_path).
DECISIONS: tuple[str, ...] = tuple(d.label for d in Decision)

# The ``result`` of a request path's read (scaler/pathpoller.py).
PATH_RESULTS = (
    "ok",
    "timeout",
    "too_large",
    "http_error",
    "connect_error",
    "parse_error",
    "no_series",
    "no_endpoint",
)


_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 3.0)


class ScalerMetrics:
    """The scaler's metrics, registered on ``registry`` in the order /metrics lists them: the calls KEDA
    makes, the agents followed, each ScaledObject's answers, the request paths read."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._missing_keys: dict[tuple[str, str], None] = {}
        self._add_call_metrics(registry)
        self._add_agent_metrics(registry)
        self._add_scaledobject_metrics(registry)
        self._add_request_path_metrics(registry)
        self.agent_reconnects = Counter(
            "gpuscale_scaler_agent_reconnects",
            "Agent Watch streams that ended and were retried",
            ["reason"],
            registry=registry,
        )

    def _add_call_metrics(self, registry: CollectorRegistry) -> None:
        """KEDA's ExternalScaler calls and StreamIsActive streams."""
        self.requests = Counter(
            "gpuscale_scaler_requests",
            "ExternalScaler calls answered, by method and gRPC status code",
            ["method", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "gpuscale_scaler_request_duration_seconds",
            "Time to answer an ExternalScaler call (StreamIsActive: each message)",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.streams = Gauge("gpuscale_scaler_streams", "Open StreamIsActive streams", registry=registry)
        self.stream_messages = Counter(
            "gpuscale_scaler_stream_messages",
            "IsActive messages sent on StreamIsActive streams",
            registry=registry,
        )

    def _add_agent_metrics(self, registry: CollectorRegistry) -> None:
        """The agents followed and the GPU selections cached."""
        self.agents_connected = Gauge(
            "gpuscale_scaler_agents_connected", "Agents whose Watch stream is open", registry=registry
        )
        self.agents_known = Gauge("gpuscale_scaler_agents", "Agent addresses discovered", registry=registry)
        self.stale_nodes = Gauge(
            "gpuscale_scaler_stale_nodes",
            "Nodes whose agent stream is gone (their data ages)",
            registry=registry,
        )
        self.workloads = Gauge(
            "gpuscale_scaler_workloads",
            "Cached GPU selections (workloads and pools being asked about)",
            registry=registry,
        )
        self.agent_updates = Counter(
            "gpuscale_scaler_agent_updates", "Watch messages applied from agents", registry=registry
        )

    def _add_scaledobject_metrics(self, registry: CollectorRegistry) -> None:
        """Per ScaledObject (bounded by ``_touch``): its last answer, what the scaler learned of its
        workload, and the decisions that moved its answers."""
        self.missing_pods = Gauge(
            "gpuscale_scaler_missing_pods",
            "GPU pods of a workload without a fresh, attributed sample at its last call (its agent gone, no "
            "device listed, share unknown), per ScaledObject",
            ["namespace", "scaledobject"],
            registry=registry,
        )
        self.trigger_value = Gauge(
            "gpuscale_scaler_trigger_value",
            "The value of a ScaledObject's last successful GetMetrics (what the HPA divides by the target)",
            ["namespace", "scaledobject"],
            registry=registry,
        )
        self.trigger_target = Gauge(
            "gpuscale_scaler_trigger_target",
            "The target of a ScaledObject's trigger, as GetMetricSpec gives it",
            ["namespace", "scaledobject"],
            registry=registry,
        )
        self.trigger_code = Gauge(
            "gpuscale_scaler_trigger_code",
            "The gRPC status code of a ScaledObject's last GetMetrics: 0 OK, 14 UNAVAILABLE, "
            "3 INVALID_ARGUMENT, ...",
            ["namespace", "scaledobject"],
            registry=registry,
        )
        self.cold_start = Gauge(
            "gpuscale_workload_cold_start_seconds",
            "A ScaledObject's workload's cold start as the scaler learned it from its pods: the median of "
            "its last pods' times from scheduled to Ready (once one has been seen Ready)",
            ["namespace", "scaledobject"],
            registry=registry,
        )
        self.capacity = Gauge(
            "gpuscale_workload_replica_capacity_requests_per_second",
            "What one replica of a ScaledObject's workload serves, as the scaler learned it while requests "
            "waited on its pods (request_rate triggers): the median of its last observations",
            ["namespace", "scaledobject"],
            registry=registry,
        )
        self.decisions = Counter(
            "gpuscale_scaler_decisions",
            "GetMetrics answers of a ScaledObject that a decision moved from the plain value, by decision: "
            "ahead (scaleAhead), n_minus_1_guard, kv_cache_guard, backlog_hold, all_pods_loading, uncapped "
            "(GPU utilization uncapped by the engines' demand), request_path (the demand the request path "
            "counts), capacity (the demand at a replica's learned capacity)",
            ["namespace", "scaledobject", "decision"],
            registry=registry,
        )

    def _add_request_path_metrics(self, registry: CollectorRegistry) -> None:
        """The request paths' reads, per Service, and the demand each ScaledObject's path said."""
        self.request_path_reads = Counter(
            "gpuscale_scaler_request_path_reads",
            "Reads of a request path's endpoints (scaler/pathpoller.py), per Service, by result: ok, "
            "timeout, too_large, http_error, connect_error, parse_error, no_series (no series of the "
            "workload), no_endpoint (no ready endpoint, or the Service cannot be used: one per round)",
            ["namespace", "service", "result"],
            registry=registry,
        )
        self.request_path_demand = Gauge(
            "gpuscale_scaler_request_path_demand",
            "The demand a ScaledObject's request path said at its last evaluation, requests/s (arrivals' "
            "rate plus what it holds over requestPathDrainSeconds); absent while the source is missing",
            ["namespace", "scaledobject"],
            registry=registry,
        )

    def answered(self, method: str, code: str, seconds: float) -> None:
        """Count one answered call of ``method`` with status ``code`` that took ``seconds``. The labelled
        children are looked up once (``labels`` takes a lock and builds a key on every call)."""
        key = (method, code)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (self.requests.labels(method, code), self.latency.labels(method))
        children[0].inc()
        children[1].observe(seconds)

    def set_missing(self, namespace: str, name: str, missing: int) -> None:
        """``gpuscale_scaler_missing_pods`` of one ScaledObject."""
        self._touch(namespace, name)
        self.missing_pods.labels(namespace, name).set(missing)

    def set_trigger(self, namespace: str, name: str, code: int, target: float, value: float | None) -> None:
        """A ScaledObject's last ``GetMetrics``: its status code, target and (when answered) value."""
        self._touch(namespace, name)
        self.trigger_code.labels(namespace, name).set(code)
        self.trigger_target.labels(namespace, name).set(target)
        if value is not None:
            self.trigger_value.labels(namespace, name).set(value)

    def set_cold_start(self, namespace: str, name: str, seconds: float) -> None:
        """``gpuscale_workload_cold_start_seconds`` of one ScaledObject."""
        self._touch(namespace, name)
        self.cold_start.labels(namespace, name).set(seconds)

    def set_capacity(self, namespace: str, name: str, rate: float) -> None:
        """``gpuscale_workload_replica_capacity_requests_per_second`` of one ScaledObject."""
        self._touch(namespace, name)
        self.capacity.labels(namespace, name).set(rate)

    def count_decision(self, namespace: str, name: str, decision: Decision | None) -> None:
        """One ``GetMetrics`` answer moved by ``decision`` (nothing for the plain value: ``None``)."""
        if decision is not None:
            self._touch(namespace, name)
            self.decisions.labels(namespace, name, decision.label).inc()

    def set_path_demand(self, namespace: str, name: str, demand: float | None) -> None:
        """``gpuscale_scaler_request_path_demand`` of one ScaledObject (``None``: missing, no series)."""
        self._touch(namespace, name)
        if demand is None:
            try:
                self.request_path_demand.remove(namespace, name)
            except KeyError:
                pass
        else:
            self.request_path_demand.labels(namespace, name).set(demand)

    def count_path_read(self, namespace: str, service: str, result: str) -> None:
        """One read of a request path's endpoint (or a round without one), by ``result``."""
        self.request_path_reads.labels(namespace, service, result).inc()

    def forget_path_source(self, namespace: str, service: str) -> None:
        """The series of a Service no request path reads any more (bounded as the sources are)."""
        for result in PATH_RESULTS:
            try:
                self.request_path_reads.remove(namespace, service, result)
            except KeyError:
                pass

    def _touch(self, namespace: str, name: str, *, limit: int = 4096) -> None:
        """At most ``limit`` ScaledObjects have per-object series (the least recently answered go first), so
        churn cannot grow them without bound."""
        key = (namespace, name)
        self._missing_keys.pop(key, None)
        self._missing_keys[key] = None
        while len(self._missing_keys) > limit:
            old = next(iter(self._missing_keys))
            del self._missing_keys[old]
            for gauge in (
                self.missing_pods,
                self.trigger_value,
                self.trigger_target,
                self.trigger_code,
                self.cold_start,
                self.capacity,
                self.request_path_demand,
            ):
                try:
                    gauge.remove(*old)
                except KeyError:
                    pass
            for label in DECISIONS:
                try:
                    self.decisions.remove(*old, label)
                except KeyError:
                    pass

    def agent_update(self) -> None:
        self.agent_updates.inc()

    def agent_reconnect(self, reason: str) -> None:
        self.agent_reconnects.labels(reason).inc()

    def bind(
        self,
        *,
        agents_connected: Callable[[], float] | None = None,
        agents_known: Callable[[], float] | None = None,
        stale_nodes: Callable[[], float] | None = None,
        workloads: Callable[[], float] | None = None,
    ) -> None:
        """Read these gauges from live state at scrape time."""
        for gauge, fn in (
            (self.agents_connected, agents_connected),
            (self.agents_known, agents_known),
            (self.stale_nodes, stale_nodes),
            (self.workloads, workloads),
        ):
            if fn is not None:
                gauge.set_function(fn)
