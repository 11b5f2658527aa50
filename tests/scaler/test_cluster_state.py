"""ClusterState without a network: Watch messages in, selections out; discovery; `gpuscale scaler` flags."""

from __future__ import annotations

import argparse
import socket
import time
from typing import Any

import pytest

from gpuscale._proto import agent_pb2
from gpuscale.errors import UsageError
from gpuscale.scaler.discovery import DnsDiscovery, StaticDiscovery
from gpuscale.scaler.source import Query
from gpuscale.scaler.state import ClusterState
from gpuscale.scaling.selector import parse_selector
from tests.scaler.node_updates import SNAP, UPD, gpu, msg

LLM = Query("workload", "default", parse_selector("app=llm"))


def test_selection_is_cached_until_its_namespace_changes() -> None:
    state = ClusterState()
    state.apply(
        msg(
            SNAP,
            "n1",
            [gpu("g1", 50, (("default", "llm-0"),)), gpu("g2", 10, (("ml", "x"),))],
            {"default/llm-0": {"app": "llm"}, "ml/x": {"app": "llm"}},
        )
    )
    first = state.select(LLM)
    assert [s.uuid for s in first.series] == ["g1"] and first.pods == 1
    state.apply(msg(UPD, "n1", [gpu("g1", 60, (("default", "llm-0"),))]))  # samples only: same selection
    assert state.select(LLM) is first
    assert [x.gpu_utilization for x in first.series[0].samples] == [50, 60]  # live samples
    pods = {"default/llm-0": {"app": "llm"}, "ml/x": {"app": "other"}}  # complete, as the agent sends it
    state.apply(msg(UPD, "n1", [gpu("g2", 10, (("ml", "x"),))], pods))  # a change in another namespace
    assert state.select(LLM) is first
    state.apply(msg(UPD, "n1", [gpu("g2", 10, (("default", "llm-0"),))]))  # attribution in ns changes
    assert sorted(s.uuid for s in state.select(LLM).series) == ["g1", "g2"]


def test_update_from_another_agent_process_is_ignored_and_snapshot_replaces() -> None:
    state = ClusterState()
    state.apply(msg(SNAP, "n1", [gpu("g1", 50, (("default", "llm-0"),))], {"default/llm-0": {"app": "llm"}}))
    state.apply(msg(UPD, "n1", [gpu("g1", 99, (("default", "llm-0"),))], agent="old"))
    assert [x.gpu_utilization for x in state.select(LLM).series[0].samples] == [50]
    state.apply(msg(SNAP, "n1", [gpu("g9", 5)], {}, agent="a2"))  # restarted, other GPUs, no pods
    assert state.select(LLM).pods == 0 and state.select(Query("pool")).uuids == {"g9"}


def test_disconnect_marks_stale_and_sweep_forgets() -> None:
    now = [100.0]
    state = ClusterState(monotonic=lambda: now[0])
    state.apply(msg(SNAP, "n1", [gpu("g1", 50)], {}))
    state.mark_disconnected("n1", "someone-else")
    assert state.stale_nodes == 0
    state.mark_disconnected("n1", "a1")
    assert state.stale_nodes == 1 and state.sweep(60) == []
    now[0] += 61
    assert state.sweep(60) == ["n1"] and state.problem() is not None


async def test_feed_wakes_only_for_its_gpus_or_namespace() -> None:
    state = ClusterState()
    state.apply(
        msg(
            SNAP,
            "n1",
            [gpu("g1", 50, (("default", "llm-0"),)), gpu("g2", 1)],
            {"default/llm-0": {"app": "llm"}},
        )
    )
    feed = state.feed(LLM)
    feed.follow(state.select(LLM).uuids)
    feed.event.clear()
    state.apply(msg(UPD, "n1", [gpu("g2", 2)]))
    assert not feed.event.is_set()
    state.apply(msg(UPD, "n1", [gpu("g1", 51, (("default", "llm-0"),))]))
    assert feed.event.is_set()
    feed.close()
    assert state.feeds == 0


async def test_feed_follows_a_new_set_of_gpus_and_leaves_nothing_behind_when_closed() -> None:
    state = ClusterState()
    state.apply(msg(SNAP, "n1", [gpu("g1", 50), gpu("g2", 1)]))
    pool = Query("pool", node_selector=parse_selector("kubernetes.io/hostname=n1"))
    feed = state.feed(pool)
    feed.follow(frozenset({"g1"}))
    feed.follow(frozenset({"g2"}))  # the stream's selection changed
    feed.event.clear()
    state.apply(msg(UPD, "n1", [gpu("g1", 51)]))
    assert not feed.event.is_set()
    state.apply(msg(UPD, "n1", [gpu("g2", 2)]))
    assert feed.event.is_set()
    feed.close()
    feed.close()  # twice is harmless
    feed.event.clear()
    state.apply(msg(UPD, "n1", [gpu("g2", 3)]))
    assert not feed.event.is_set()
    assert state.feeds == 0 and not state._feeds_by_uuid and not state._feeds_by_ns  # no index entry leaks


def test_pool_scope_matches_node_labels() -> None:
    state = ClusterState()
    state.apply(msg(SNAP, "n1", [gpu("g1", 50)], {}))
    state.apply(msg(SNAP, "n2", [gpu("g2", 50)], {}))
    state.set_node_labels("n2", {"pool": "h200"})
    pool = Query("pool", node_selector=parse_selector("pool=h200"))
    assert state.select(pool).uuids == {"g2"}
    by_name = Query("pool", node_selector=parse_selector("kubernetes.io/hostname=n1"))
    assert state.select(by_name).uuids == {"g1"}


def with_labels(m: agent_pb2.NodeUpdate, labels: dict[str, str]) -> agent_pb2.NodeUpdate:
    m.node_labels.update(labels)
    m.node_labels_changed = m.kind == UPD
    return m


def test_node_labels_arrive_with_the_stream() -> None:
    """Labels come in a snapshot and in updates that say they changed; a snapshot without labels (an agent that
    has not read its Node yet) keeps what was known; an update that says they changed to none resets them."""
    state = ClusterState()
    h200 = Query("pool", node_selector=parse_selector("pool=h200,!spot"))
    state.apply(with_labels(msg(SNAP, "n1", [gpu("g1", 50)]), {"pool": "h200"}))
    state.apply(msg(SNAP, "n2", [gpu("g2", 50)]))
    assert state.select(h200).uuids == {"g1"}
    feed = state.feed(h200)
    feed.follow(state.select(h200).uuids)
    feed.event.clear()

    state.apply(with_labels(msg(UPD, "n2", []), {"pool": "h200"}))
    assert feed.event.is_set()  # a pool's stream wakes when a node joins it
    assert state.select(h200).uuids == {"g1", "g2"}
    assert state.node_labels("n2") == {"kubernetes.io/hostname": "n2", "pool": "h200"}

    feed.event.clear()
    state.apply(with_labels(msg(UPD, "n1", []), {"pool": "h200", "spot": "true"}))
    assert feed.event.is_set()
    assert state.select(h200).uuids == {"g2"}
    state.apply(msg(UPD, "n2", [gpu("g2", 60)]))  # samples alone leave the labels be
    assert state.select(h200).uuids == {"g2"}

    state.apply(msg(SNAP, "n2", [gpu("g2", 50)], agent="a2"))  # the agent restarted; no labels yet
    assert state.select(h200).uuids == {"g2"}
    m = msg(UPD, "n2", [], agent="a2")
    m.node_labels_changed = True  # its Node was deleted
    state.apply(m)
    assert state.select(h200).uuids == set()
    assert state.node_labels("n2") == {"kubernetes.io/hostname": "n2"}
    feed.close()


async def test_dns_discovery() -> None:
    async def resolver(name: str, port: int, **kw: Any) -> list[tuple[Any, ...]]:
        assert (name, port) == ("agents.svc", 6000)
        return [
            (socket.AF_INET, 1, 6, "", ("10.0.0.1", 6000)),
            (socket.AF_INET6, 1, 6, "", ("fd00::2", 6000, 0, 0)),
        ]

    assert await DnsDiscovery("agents.svc", 6000, resolver=resolver).addresses() == {
        "10.0.0.1:6000",
        "[fd00::2]:6000",
    }

    async def failing(*a: Any, **kw: Any) -> list[tuple[Any, ...]]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    assert await DnsDiscovery("agents.svc", 6000, resolver=failing).addresses() is None  # keep what was found

    async def nxdomain(*a: Any, **kw: Any) -> list[tuple[Any, ...]]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    # A headless Service with no ready pod: cluster DNS says the name does not exist. That is "no agent".
    assert await DnsDiscovery("agents.svc", 6000, resolver=nxdomain).addresses() == set()

    assert await StaticDiscovery(["a:1", " b:2 ", ""]).addresses() == {"a:1", "b:2"}
    with pytest.raises(UsageError, match='--agents "nope" must be HOST:PORT'):
        StaticDiscovery(["nope"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give the agents"),
        (["--agents", "a:1", "--agents-dns", "b:2"], "not both"),
        (["--agents", "a:1", "--tls-cert", "x.pem"], "needs both --tls-cert and --tls-key"),
        (["--agents-dns", "agents"], '--agents-dns "agents" must be HOST:PORT'),
        (["--agents", "a:1", "--forget-after", "0"], '--forget-after "0" must be greater than 0'),
        (["--agents", "a:1", "--ready-grace", "soon"], '--ready-grace "soon" must be a number of seconds'),
    ],
)
def test_scaler_flags(argv: list[str], message: str) -> None:
    from gpuscale.cli import scaler as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["scaler", *argv])
    with pytest.raises(UsageError, match=message):
        cli.settings_from_args(args)


def test_scaler_flag_defaults() -> None:
    from gpuscale.cli import scaler as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    s = cli.settings_from_args(parser.parse_args(["scaler", "--agents-dns", "gpuscale-agent.sys.svc:6000"]))
    assert (s.grpc_address, s.metrics_address, s.agents_dns) == (
        "[::]:6001",
        "[::]:9401",
        "gpuscale-agent.sys.svc:6000",
    )
    assert (s.subscriber.forget_after_s, s.ready_grace_s) == (600.0, 10.0)
    s = cli.settings_from_args(
        parser.parse_args(["scaler", "--agents", "a:1", "--forget-after", "90", "--ready-grace", "3"])
    )
    assert (s.subscriber.forget_after_s, s.ready_grace_s) == (90.0, 3.0)


def test_only_pods_that_ask_for_a_gpu_count_as_gpu_pods_and_old_agents_say_nothing() -> None:
    """An agent tells which pods ask for a GPU; one older than that field tells nothing, and its pods are
    not counted as GPU pods (the scaler then answers 0 for them, as it did before)."""
    state = ClusterState()
    m = msg(SNAP, "n1", [gpu("g1", 50)])
    m.pods.add(namespace="default", name="llm-0", uid="u0", labels={"app": "llm"}, wants_gpu=True)
    m.pods.add(namespace="default", name="llm-router", uid="u1", labels={"app": "llm"}, wants_gpu=False)
    m.pods.add(namespace="default", name="llm-old", uid="u2", labels={"app": "llm"})  # an older agent's
    state.apply(m)
    selection = state.select(LLM)
    assert (selection.pods, [p.name for p in selection.gpu_pods], selection.series) == (
        3,
        ["default/llm-0"],
        (),
    )


def test_engine_readings_by_pod_and_an_older_agent_said_to_be_upgraded() -> None:
    from gpuscale.convert import engine_reading_to_pb
    from gpuscale.model import EngineSample, ModelSignals

    state = ClusterState()
    old = msg(SNAP, "n1", [gpu("g1", 50, (("default", "llm-0"),))])  # an agent from before engines
    old.pods.add(namespace="default", name="llm-0", uid="u0", labels={"app": "llm"}, wants_gpu=True)
    state.apply(old)
    (engine,) = state.select(LLM).engines
    assert engine.missing == "the agent of n1 reads no engines (upgrade gpuscale agent)"

    new = msg(SNAP, "n2", [gpu("g2", 50, (("default", "llm-1"),))], agent="a2")
    new.engines_supported = True
    new.pods.add(namespace="default", name="llm-1", uid="u1", labels={"app": "llm"}, wants_gpu=True)
    e = new.engines.add(namespace="default", pod="llm-1")
    e.readings.append(
        engine_reading_to_pb(EngineSample(time.time(), "vllm", (ModelSignals("m", waiting=7.0),)))
    )
    state.apply(new)
    by_pod = {x.pod: x for x in state.select(LLM).engines}
    assert (
        by_pod["default/llm-1"].missing is None
        and by_pod["default/llm-1"].samples[-1].models[0].waiting == 7.0
    )
    # the engine stops answering: the agent says why, and the pod has no engine value until it reads again
    upd = msg(UPD, "n2", [], agent="a2")
    upd.engines.add(
        namespace="default",
        pod="llm-1",
        missing_reason="timeout",
        missing_detail="no answer in 0.8 s",
        missing_at=time.time() + 1,
    )
    state.apply(upd)
    by_pod = {x.pod: x for x in state.select(LLM).engines}
    assert by_pod["default/llm-1"].missing == "engine not read: timeout (no answer in 0.8 s)"


def test_an_agent_restarting_twice_before_it_read_its_pods_is_not_followed() -> None:
    """A view carried from a view that was itself incomplete is no view: such a node's agent's word on its
    pods is not live (the API's list of them then counts)."""
    state = ClusterState()
    first = msg(SNAP, "n1", [gpu("g1", 50)], {}, agent="a1")
    first.complete = False
    state.apply(first)
    assert not state.follows("n1")
    state.mark_disconnected("n1", "a1")
    second = msg(SNAP, "n1", [gpu("g1", 50)], {}, agent="a2")
    second.complete = False
    state.apply(second)
    assert not state.follows("n1")
    done = msg(UPD, "n1", [], {}, agent="a2")
    done.complete = True
    state.apply(done)
    assert state.follows("n1")


def test_pod_readiness_travels_and_an_older_agent_leaves_it_unknown() -> None:
    """A newer agent says whether each pod is Ready and since when (the scaler learns cold starts from it);
    an older agent says nothing: readiness not known, no cold start."""
    import dataclasses

    from gpuscale.convert import pod_from_pb, pod_to_pb
    from gpuscale.model import PodInfo
    from gpuscale.scaler.source import PodStart

    loading = PodInfo("default", "llm-1", "u1", {"app": "llm"}, True, ready=False, scheduled_at=1000.0)
    serving = PodInfo(
        "default", "llm-0", "u0", {"app": "llm"}, True, ready=True, scheduled_at=900.0, ready_at=990.0
    )
    assert pod_from_pb(pod_to_pb(loading)) == loading and pod_from_pb(pod_to_pb(serving)) == serving
    state = ClusterState()
    new = msg(SNAP, "n1", [gpu("g1", 50)])
    new.pods.extend([pod_to_pb(serving), pod_to_pb(loading)])
    old = msg(SNAP, "n2", [gpu("g2", 50)], agent="a2")
    old.pods.add(namespace="default", name="llm-old", uid="u2", labels={"app": "llm"}, wants_gpu=True)
    state.apply(new)
    state.apply(old)
    selection = state.select(LLM)
    assert {p.name: p.ready for p in selection.gpu_pods} == {
        "default/llm-0": True,
        "default/llm-1": False,
        "default/llm-old": None,
    }
    assert selection.started == (PodStart("default/llm-0", 900.0, 990.0),)
    # llm-1 becomes Ready: the agent sends its pods again, and the selection follows
    upd = msg(UPD, "n1", [])
    upd.pods_changed = True
    upd.pods.extend(
        [pod_to_pb(serving), pod_to_pb(dataclasses.replace(loading, ready=True, ready_at=1100.0))]
    )
    state.apply(upd)
    selection = state.select(LLM)
    assert {p.name: p.ready for p in selection.gpu_pods}["default/llm-1"] is True
    assert sorted(s.pod for s in selection.started) == ["default/llm-0", "default/llm-1"]
