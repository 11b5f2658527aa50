"""The request path in ``scaling``: its demand from a gateway's readings, where it may point, and what the
answer does with it (the wake from zero at the demand's replicas, the floor where pods are Ready, the
missing source); and a replica's capacity learned while requests wait."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from gpuscale.model import EngineSample, ModelSignals
from gpuscale.scaling import TriggerMetadata, parse_metadata
from gpuscale.scaling.answer import GpuPod, answer
from gpuscale.scaling.capacity import Capacities, saturated_rate
from gpuscale.scaling.engine import EngineSeries
from gpuscale.scaling.errors import MetadataError, MissingPods, RequestPathMissing
from gpuscale.scaling.requestpath import (
    STALE_AFTER_S,
    PathReading,
    RequestPath,
    RequestPathRef,
    demand,
    parse_ref,
)
from gpuscale.scaling.signals import replica_rate
from gpuscale.scaling.view import WorkloadView

NOW = 10_000.0
GATEWAY = {"requestPath": "gateway:9090", "requestPathFormat": "envoy"}


def path(rate: float, held: float = 0.0, seconds: int = 20, start: float = 0.0) -> RequestPath:
    """A gateway read every second up to NOW: ``rate`` requests/s arriving, ``held`` held at each reading."""
    return RequestPath(
        [PathReading(NOW - k, start + rate * (seconds - k), held) for k in range(seconds, -1, -1)]
    )


def md_of(**extra: str) -> TriggerMetadata:
    return parse_metadata({"metric": "request_rate", "targetValue": "4", **GATEWAY, **extra})


# ----- the demand -----------------------------------------------------------------------------------------
def test_demand_is_the_arrivals_rate_plus_what_is_held_drained_within_the_drain_time() -> None:
    pd = demand(path(30.0, held=120.0), NOW, 60.0)
    assert pd is not None
    assert pd.rate == pytest.approx(30.0)
    assert pd.held == 120.0
    assert pd.demand == pytest.approx(32.0)


def test_a_restarted_source_starts_its_rate_over_and_it_is_never_negative() -> None:
    readings = [PathReading(NOW - k, 1000.0 + 10 * (10 - k)) for k in range(10, 2, -1)]
    readings += [PathReading(NOW - k, 4.0 * (3 - k)) for k in range(2, -1, -1)]  # back to 0 at NOW - 2
    pd = demand(RequestPath(readings), NOW, 60.0)
    assert pd is not None and pd.rate == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (RequestPath((), missing="endpoint 10.0.0.7:9090 timed out"), "missing"),
        (RequestPath(()), "no reading"),
        (RequestPath([PathReading(NOW - STALE_AFTER_S - 1, 5.0, 0.0)]), "too old"),
        (RequestPath([PathReading(NOW, 5.0, None)]), "one reading of a counter, nothing held"),
        (RequestPath([PathReading(NOW + 5, 5.0, 3.0)]), "from the future"),
    ],
)
def test_no_honest_reading_is_no_demand_never_zero(source: RequestPath, why: str) -> None:
    assert demand(source, NOW, 60.0) is None, why


def test_a_source_that_only_holds_says_its_demand_from_what_it_holds() -> None:
    pd = demand(RequestPath([PathReading(NOW, None, 90.0)]), NOW, 30.0)
    assert pd is not None and pd.rate is None and pd.demand == pytest.approx(3.0)


# ----- where it may point ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("gateway:9090", RequestPathRef("gateway", 9090, "/metrics")),
        ("gateway:http-metrics", RequestPathRef("gateway", "http-metrics", "/metrics")),
        ("envoy:9901/stats/prometheus", RequestPathRef("envoy", 9901, "/stats/prometheus")),
        ("infra/epp:9090/metrics", RequestPathRef("epp", 9090, "/metrics", "infra")),
    ],
)
def test_a_request_path_is_a_service_and_a_port(text: str, ref: RequestPathRef) -> None:
    assert parse_ref(text) == (ref, None)
    assert str(ref) == (text if "/" in text.split(":", 1)[1] else text + "/metrics")


@pytest.mark.parametrize(
    "text",
    [
        "http://gateway:9090/metrics",
        "10.0.0.7:9090",
        "169.254.169.254:80/latest/meta-data",
        "gateway.other.svc.cluster.local:9090",
        "user@gateway:9090",
        "gateway",
        "gateway:0",
        "gateway:65536",
        "gateway:09090",
        "gateway:a_b",
        "gateway:9090/../admin",
        "gateway:9090//x",
        "Gateway:9090",
        " gateway:9090",
        "a/b/c:1",
        "gateway:9090/m?x=1",
        "[::1]:9090",
    ],
)
def test_anything_but_a_service_is_refused(text: str) -> None:
    ref, tail = parse_ref(text)
    assert ref is None and tail is not None and "never a URL or an address" in tail


def test_bad_request_path_metadata_names_the_key_the_value_and_what_is_allowed() -> None:
    with pytest.raises(MetadataError) as e:
        parse_metadata({"metric": "request_rate", "targetValue": "4", "requestPath": "http://x:1/"})
    assert e.value.problems[0].startswith('parameter "requestPath" value "http://x:1/" must be a Service')
    assert e.value.problems[1] == (
        'parameter "requestPathFormat" is required with "requestPath"; give one of '
        "[envoy, epp, ingress-nginx, keda-http, vllm-router]"
    )
    with pytest.raises(MetadataError) as e:
        parse_metadata({"metric": "request_rate", "targetValue": "4", "replicaRate": "3"})
    assert e.value.problems == ('parameter "replicaRate" value "3" is only allowed with "requestPath"',)
    with pytest.raises(MetadataError) as e:
        parse_metadata({"metric": "gpu_utilization", "targetValue": "60", "scope": "pool", **GATEWAY})
    assert any(
        p.startswith('parameter "requestPath" value "gateway:9090" is only allowed with scope')
        for p in e.value.problems
    )


# ----- the answer -----------------------------------------------------------------------------------------
def test_at_zero_replicas_the_first_answer_asks_for_the_demands_replicas_not_one() -> None:
    """30 requests/s arriving and 60 held at the gateway, none Ready: ceil((30 + 60/60) / 4) = 8 replicas."""
    result = answer(md_of(), WorkloadView(request_path=path(30.0, held=60.0)), now=NOW)
    assert result.active
    assert math.ceil(result.value / 4 - 1e-9) == 8
    assert result.decided.startswith("request path 31.0 req/s")


def test_at_zero_with_nothing_arriving_the_answer_is_zero_and_inactive() -> None:
    result = answer(md_of(), WorkloadView(request_path=path(0.0)), now=NOW)
    assert result.value == 0 and not result.active


def test_at_zero_a_missing_source_is_an_error_never_a_zero() -> None:
    source = RequestPath((), missing="endpoint 10.0.0.7:9090: connection refused", source="Service ai/gw")
    with pytest.raises(RequestPathMissing) as e:
        answer(md_of(), WorkloadView(request_path=source, name="ScaledObject ai/qwen"), now=NOW)
    assert str(e.value) == (
        "ScaledObject ai/qwen: no pod is Ready and the request path (Service ai/gw) has no reading: endpoint "
        "10.0.0.7:9090: connection refused; KEDA keeps the replicas or applies its fallback"
    )


def test_while_every_pod_loads_the_answer_is_the_demand_never_below_the_pods_coming() -> None:
    loading = [GpuPod("a", "n1", ready=False), GpuPod("b", "n2", ready=False)]
    more = answer(md_of(), WorkloadView(pods=loading, replicas=2, request_path=path(30.0)), now=NOW)
    assert math.ceil(more.value / 4 - 1e-9) == 8 and more.active
    fewer = answer(md_of(), WorkloadView(pods=loading, replicas=2, request_path=path(2.0)), now=NOW)
    assert fewer.value == pytest.approx(8.0) and fewer.decided == "all pods loading"
    source = RequestPath((), missing="timed out")
    held = answer(md_of(), WorkloadView(pods=loading, replicas=2, request_path=source), now=NOW)
    assert held.value == pytest.approx(8.0) and held.active  # loading pods keep the count, as without it


def engine(pod: str, served: float, waiting: Callable[[float], float], seconds: int = 60) -> EngineSeries:
    """An engine that finishes ``served`` requests a second with ``waiting(t)`` waiting (running 10)."""
    readings = [
        EngineSample(
            NOW - k,
            "vllm",
            (
                ModelSignals(
                    "m", waiting=waiting(NOW - k), running=10.0, requests_finished=served * (seconds - k)
                ),
            ),
        )
        for k in range(seconds, -1, -1)
    ]
    return EngineSeries(pod, readings)


def test_where_pods_are_ready_the_answer_is_at_least_what_the_request_path_counts() -> None:
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    engines = [engine("a", 4.0, lambda t: 0.0), engine("b", 4.0, lambda t: 0.0)]
    plain = answer(md_of(), WorkloadView(pods=pods, engines=engines, request_path=path(8.0)), now=NOW)
    assert plain.value == pytest.approx(8.0) and plain.decided == ""
    raised = answer(
        md_of(), WorkloadView(pods=pods, engines=engines, request_path=path(20.0, held=60.0)), now=NOW
    )
    assert raised.value == pytest.approx(21.0) and raised.decided.startswith("request path")
    gone = answer(
        md_of(), WorkloadView(pods=pods, engines=engines, request_path=RequestPath((), "refused")), now=NOW
    )
    assert gone.value == pytest.approx(8.0)  # the engines speak: a missing source changes nothing


def test_a_queue_trigger_without_a_rate_only_wakes_and_with_replica_rate_asks_for_the_demand() -> None:
    queue = {"metric": "queue_length", "targetValue": "5", **GATEWAY}
    woken = answer(parse_metadata(queue), WorkloadView(request_path=path(30.0)), now=NOW)
    assert woken.value == pytest.approx(5.0) and woken.active  # one replica: nothing to divide by
    md = parse_metadata({**queue, "replicaRate": "6"})
    asked = answer(md, WorkloadView(request_path=path(30.0)), now=NOW)
    assert math.ceil(asked.value / 5 - 1e-9) == 5


# ----- a replica's capacity, learned ----------------------------------------------------------------------
def test_saturated_rate_counts_only_the_pods_on_which_requests_waited_throughout() -> None:
    md = md_of()
    busy = engine("a", 3.0, lambda t: 40.0)
    idle = engine("b", 1.0, lambda t: 0.0)
    assert saturated_rate(md, [busy, idle], frozenset({"a", "b"}), NOW) == pytest.approx(3.0)
    assert saturated_rate(md, [idle], frozenset({"b"}), NOW) is None
    assert saturated_rate(md, [busy], frozenset({"b"}), NOW) is None  # not Ready: not counted


def test_capacities_keep_a_median_one_observation_per_spacing() -> None:
    c = Capacities(keep=3, spacing=10.0)
    assert c.rate("w") is None
    assert c.observe("w", 0.0, 3.0)
    assert not c.observe("w", 5.0, 100.0)  # within the spacing
    assert c.observe("w", 10.0, 100.0) and c.observe("w", 20.0, 2.9)
    assert c.rate("w") == pytest.approx(3.0)
    assert not c.observe("w", 40.0, float("nan")) and not c.observe("w", 50.0, 0.0)
    assert dict(c) == {"w": pytest.approx(3.0)}


def test_a_replica_that_serves_less_than_assumed_is_asked_for_by_what_it_serves_while_the_queue_grows() -> (
    None
):
    """Two Ready pods each finishing 3 a second while 18 arrive a second: the queue grows by 12 a second.
    The target assumes 4 per replica: ceil(18 / 4) = 5; what they serve needs ceil(18 / 3) = 6."""
    md = parse_metadata({"metric": "request_rate", "targetValue": "4"})
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    engines = [
        engine("a", 3.0, lambda t: 6.0 * (t - NOW + 60)),
        engine("b", 3.0, lambda t: 6.0 * (t - NOW + 60)),
    ]
    assumed = answer(md, WorkloadView(pods=pods, engines=engines), now=NOW)
    assert math.ceil(assumed.value / 4 - 1e-9) == 5
    learned = answer(md, WorkloadView(pods=pods, engines=engines, capacity=3.0), now=NOW)
    assert math.ceil(learned.value / 4 - 1e-9) == 6 and learned.decided == "capacity 3.00 req/s"
    draining = [engine("a", 3.0, lambda t: 600 - 6.0 * (t - NOW + 60)), engine("b", 3.0, lambda t: 0.0)]
    held = answer(md, WorkloadView(pods=pods, engines=draining, capacity=3.0), now=NOW)
    assert held.decided != "capacity 3.00 req/s"  # the queue does not grow: the demand's answer stands


def test_the_request_paths_rate_is_the_learned_capacity_where_a_replica_serves_less() -> None:
    assert replica_rate(md_of(), None) == 4.0
    assert replica_rate(md_of(), 3.0) == 3.0
    assert replica_rate(md_of(), 6.0) == 4.0
    assert replica_rate(md_of(replicaRate="5"), None) == 5.0
    queue = parse_metadata({"metric": "queue_length", "targetValue": "5", **GATEWAY})
    assert replica_rate(queue, None) is None and replica_rate(queue, 7.0) == 7.0


def test_a_burst_after_idle_reads_as_its_rate_at_once_not_as_a_ramp_over_the_window() -> None:
    """Idle, then 35 requests/s from NOW - 2: the counter stood still, then moved; its rate is 35 (over the
    whole 5 s window it would read 14)."""
    readings = [PathReading(NOW - k, 0.0, 0.0) for k in range(10, 2, -1)]
    readings += [PathReading(NOW - 1, 35.0, 0.0), PathReading(NOW, 70.0, 0.0)]
    pd = demand(RequestPath(readings), NOW, 60.0)
    assert pd is not None and pd.rate == pytest.approx(35.0)
    # its first second only partly counted (12 of 35 arrived after the reading at NOW - 2): the rate from the
    # first reading that moved
    partial = [*readings[:-2], PathReading(NOW - 1, 12.0, 0.0), PathReading(NOW, 47.0, 0.0)]
    pd = demand(RequestPath(partial), NOW, 60.0)
    assert pd is not None and pd.rate == pytest.approx(35.0)
    # steady traffic is the window's rate, and a lone request after idle no more than one a second
    assert demand(path(3.0), NOW, 60.0).rate == pytest.approx(3.0)  # type: ignore[union-attr]
    lone = [PathReading(NOW - k, 5.0 if k > 0 else 6.0, 0.0) for k in range(5, -1, -1)]
    assert demand(RequestPath(lone), NOW, 60.0).rate == pytest.approx(1.0)  # type: ignore[union-attr]


def test_pods_whose_engines_are_unread_hold_the_count_and_the_request_path_still_scales_up() -> None:
    """Two Ready pods, neither engine read (MissingPods without a request path): with one, the answer is
    the larger of its replicas and the workload's, never below them."""
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    unread = [EngineSeries("a", (), "connect_error"), EngineSeries("b", (), "connect_error")]
    with pytest.raises(MissingPods):
        answer(md_of(), WorkloadView(pods=pods, engines=unread), now=NOW)
    up = answer(md_of(), WorkloadView(pods=pods, engines=unread, request_path=path(30.0)), now=NOW)
    assert math.ceil(up.value / 4 - 1e-9) == 8 and up.active and up.missing == 2
    held = answer(
        md_of(), WorkloadView(pods=pods, engines=unread, replicas=3, request_path=path(1.0)), now=NOW
    )
    assert math.ceil(held.value / 4 - 1e-9) == 3
    with pytest.raises(MissingPods):
        answer(
            md_of(), WorkloadView(pods=pods, engines=unread, request_path=RequestPath((), "refused")), now=NOW
        )


def test_where_pods_are_ready_the_workload_stays_active_while_requests_arrive() -> None:
    """One Ready pod serving 8 requests/s, nothing waiting: the queue trigger alone is inactive (its queue is
    0), so KEDA's cooldown would take it to zero while it serves; the request path still counts arrivals."""
    queue = parse_metadata({"metric": "queue_length", "targetValue": "5", **GATEWAY})
    pods = [GpuPod("a", "n1", ready=True)]
    engines = [engine("a", 8.0, lambda t: 0.0)]
    alone = answer(queue, WorkloadView(pods=pods, engines=engines), now=NOW)
    assert not alone.active
    served = answer(queue, WorkloadView(pods=pods, engines=engines, request_path=path(8.0)), now=NOW)
    assert served.active and served.value == alone.value
    idle = answer(queue, WorkloadView(pods=pods, engines=engines, request_path=path(0.0)), now=NOW)
    assert not idle.active


def test_a_target_as_a_share_of_what_a_replica_serves() -> None:
    """``targetValue: 80%``: until a capacity is learned, of ``replicaRate``; then of the learned one. 18
    requests/s arriving on two pods: at 80 % of 5 that is ceil(18 / 4) = 5 replicas; of a learned 3, ceil(18
    / 2.4) = 8. The value is in percent of one replica's capacity: the HPA divides it by 80."""
    md = parse_metadata({"metric": "request_rate", "targetValue": "80%", "replicaRate": "5"})
    assert (md.target_value, md.target_share, md.replica_rate) == (80.0, True, 5.0)
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    engines = [engine("a", 9.0, lambda t: 0.0), engine("b", 9.0, lambda t: 0.0)]
    assumed = answer(md, WorkloadView(pods=pods, engines=engines), now=NOW)
    assert assumed.value == pytest.approx(100 * 18 / 5)
    assert math.ceil(assumed.value / 80 - 1e-9) == 5
    learned = answer(md, WorkloadView(pods=pods, engines=engines, capacity=3.0), now=NOW)
    assert math.ceil(learned.value / 80 - 1e-9) == 8


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        (
            {"metric": "request_rate", "targetValue": "80%"},
            'parameter "targetValue" value "80%" needs "replicaRate": the requests/s one replica serves until '
            "the scaler has learned it",
        ),
        (
            {"metric": "queue_length", "targetValue": "80%", "replicaRate": "5"},
            'parameter "targetValue" value "80%": a share of what one replica serves is only allowed with '
            'metric "request_rate" (metric is "queue_length"); give a number',
        ),
        (
            {"metric": "request_rate", "targetValue": "120%", "replicaRate": "5"},
            'parameter "targetValue" value "120%" as a share of a replica\'s capacity must be at most 100',
        ),
        (
            {"metric": "request_rate", "targetValue": "x%", "replicaRate": "5"},
            'parameter "targetValue" value "x%" as a share of a replica\'s capacity must be a finite number',
        ),
    ],
)
def test_a_bad_share_names_the_key_the_value_and_what_is_allowed(
    metadata: dict[str, str], problem: str
) -> None:
    with pytest.raises(MetadataError) as e:
        parse_metadata(metadata)
    assert problem in e.value.problems


def test_pending_replicas_and_loading_pods_are_never_answered_away() -> None:
    """Five replicas asked for, none on a GPU node yet (Pending: no GPU pod), the demand down to 1 request/s:
    the answer holds the five. Two loading pods and one missing, the replica count not known: the missing-pod
    answer counts the loading ones too."""
    pending = answer(md_of(), WorkloadView(replicas=5, request_path=path(1.0)), now=NOW)
    assert math.ceil(pending.value / 4 - 1e-9) == 5 and pending.active
    pods = [
        GpuPod("a", "n1", ready=False),
        GpuPod("b", "n1", ready=False),
        GpuPod("c", "n2", connected=False),
    ]
    gone = answer(md_of(), WorkloadView(pods=pods, request_path=path(1.0)), now=NOW)
    assert math.ceil(gone.value / 4 - 1e-9) >= 3
