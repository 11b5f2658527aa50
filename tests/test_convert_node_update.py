"""One Watch message across the wire: what the agent's ``NodeUpdate[GpuState]`` puts on it, byte for byte,
and what the scaler reads back (``NodeUpdate[GpuRows]``), with the devices it holds not read again."""

from __future__ import annotations

import math

from gpuscale._proto import agent_pb2
from gpuscale.convert import (
    assignment_to_pb,
    device_to_pb,
    engine_reading_to_pb,
    node_update_from_pb,
    node_update_to_pb,
    pod_to_pb,
    sample_row_from_pb,
    sample_to_pb,
)
from gpuscale.model import (
    Assignment,
    BucketCounts,
    ContainerRef,
    DeviceInfo,
    EngineMissing,
    EngineSample,
    EngineState,
    GpuRows,
    GpuSample,
    GpuState,
    ModelSignals,
    NodeUpdate,
    PodInfo,
    ProcessSample,
)

GPU = DeviceInfo(0, "GPU-0", "H100", "0000:01:00.0", 80 << 30, 700.0, mig_enabled=False)
MIG = DeviceInfo(
    1, "MIG-1", "H100 MIG", "0000:02:00.0", None, None, parent_uuid="GPU-9", mig_profile="1g.10gb"
)
REF = ContainerRef("ns", "p", "c")
OWNERS = {7: REF}
SAMPLES = (
    GpuSample(
        "GPU-0", 10.0, 50.0, memory_used_bytes=1 << 30, processes=(ProcessSample(7, 5), ProcessSample(8))
    ),
    GpuSample("GPU-0", 11.0, 60.0, sm_active=12.5, processes=(ProcessSample(7, 6),)),
)
ASSIGNED = (Assignment(REF, "nvidia.com/gpu", "GPU-0"), Assignment(REF, "nvidia.com/gpu", "GPU-0::1"))
POD = PodInfo("ns", "p", "uid", {"app": "w"}, True, ready=True, scheduled_at=1.0, ready_at=2.0)
READING = EngineSample(
    9.0, "vllm", (ModelSignals("m", waiting=1.0, ttft=BucketCounts((0.1, math.inf), (1.0, 2.0))),)
)
ENGINES = (
    EngineState("ns", "p", (READING,), EngineMissing(9.5, "timeout", "took 2s")),
    EngineState("ns", "q", (READING,)),
)


def _update(snapshot: bool = True) -> NodeUpdate[GpuState]:
    return NodeUpdate(
        snapshot,
        "node-a",
        "agent-1",
        3,
        12.0,
        1.0,
        gpus=(
            GpuState(GPU, SAMPLES, OWNERS, assignments=ASSIGNED),
            GpuState(MIG, error_kind="lost", error_message="fell off the bus"),
        ),
        pods=(POD,),
        pods_changed=not snapshot,
        node_labels={"zone": "a", "kubernetes.io/hostname": "node-a"},
        node_labels_changed=not snapshot,
        complete=False,
        engines_supported=True,
        engines=ENGINES,
    )


def _by_hand(snapshot: bool = True) -> agent_pb2.NodeUpdate:
    """The message as the agent built it field by field before ``node_update_to_pb``."""
    kind = agent_pb2.NodeUpdate.SNAPSHOT if snapshot else agent_pb2.NodeUpdate.UPDATE
    msg = agent_pb2.NodeUpdate(
        kind=kind, node_name="node-a", agent_id="agent-1", sequence=3, sent_at=12.0, interval_seconds=1.0
    )
    g = msg.gpus.add(device=device_to_pb(GPU))
    for s in SAMPLES:
        g.samples.append(sample_to_pb(s, OWNERS))
    g.attributions.extend(assignment_to_pb(a) for a in ASSIGNED)
    g = msg.gpus.add(device=device_to_pb(MIG))
    g.error_kind, g.error_message = "lost", "fell off the bus"
    msg.pods_changed = not snapshot
    msg.pods.extend([pod_to_pb(POD)])
    msg.complete = False
    msg.engines_supported = True
    e = msg.engines.add(namespace="ns", pod="p")
    e.readings.extend([engine_reading_to_pb(READING)])
    e.missing_reason, e.missing_detail, e.missing_at = "timeout", "took 2s", 9.5
    e = msg.engines.add(namespace="ns", pod="q")
    e.readings.extend([engine_reading_to_pb(READING)])
    msg.node_labels_changed = not snapshot
    msg.node_labels.update({"zone": "a", "kubernetes.io/hostname": "node-a"})
    return msg


def test_the_wire_is_the_message_built_field_by_field() -> None:
    for snapshot in (True, False):
        got = node_update_to_pb(_update(snapshot)).SerializeToString(deterministic=True)
        assert got == _by_hand(snapshot).SerializeToString(deterministic=True)


def test_a_heartbeat_is_its_header_alone() -> None:
    beat = NodeUpdate[GpuState](False, "node-a", "agent-1", 4, 13.0, 1.0)
    want = agent_pb2.NodeUpdate(
        kind=agent_pb2.NodeUpdate.UPDATE,
        node_name="node-a",
        agent_id="agent-1",
        sequence=4,
        sent_at=13.0,
        interval_seconds=1.0,
    )
    assert node_update_to_pb(beat).SerializeToString() == want.SerializeToString()
    read = node_update_from_pb(want)
    assert read == NodeUpdate[GpuRows](False, "node-a", "agent-1", 4, 13.0, 1.0)
    assert read.complete is None and not read.engines_supported


def test_the_scaler_reads_back_rows_holders_and_the_rest() -> None:
    msg = node_update_to_pb(_update())
    read = node_update_from_pb(agent_pb2.NodeUpdate.FromString(msg.SerializeToString()))
    assert (read.snapshot, read.node_name, read.agent_id, read.sequence) == (True, "node-a", "agent-1", 3)
    assert (read.sent_at, read.interval_seconds, read.complete, read.engines_supported) == (
        12.0,
        1.0,
        False,
        True,
    )
    assert read.pods == (POD,) and read.node_labels == {"zone": "a", "kubernetes.io/hostname": "node-a"}
    assert not read.pods_changed and not read.node_labels_changed
    assert read.engines == ENGINES
    gpu, mig = read.gpus
    rows = [sample_row_from_pb(s) for s in msg.gpus[0].samples]
    assert gpu.rows == tuple((s.timestamp, r[0], r[1]) for s, r in zip(SAMPLES, rows, strict=True))
    assert len(gpu.rows[0][1]) < len(gpu.rows[1][1])  # the GPM fields only where the sample has them
    assert gpu.device == GPU and gpu.owners == OWNERS  # the newest sample's
    assert gpu.holders == (("ns", "p"), ("ns", "p")) and (gpu.error_kind, gpu.error_message) == ("", "")
    assert mig == GpuRows(MIG, error_kind="lost", error_message="fell off the bus")


def test_an_engine_failure_without_a_reason_is_none() -> None:
    msg = agent_pb2.NodeUpdate(kind=agent_pb2.NodeUpdate.UPDATE, node_name="n", agent_id="a")
    msg.engines.add(namespace="ns", pod="p", missing_detail="stray", missing_at=3.0)
    (engine,) = node_update_from_pb(msg).engines
    assert engine == EngineState("ns", "p")


def test_an_update_keeps_the_device_its_reader_holds_and_a_snapshot_reads_its_own() -> None:
    held = DeviceInfo(0, "GPU-0", "as held", "0000:01:00.0", None, None)
    asked: list[tuple[str, str]] = []

    def holds(node: str, uuid: str) -> DeviceInfo | None:
        asked.append((node, uuid))
        return held if uuid == "GPU-0" else None

    update = node_update_from_pb(node_update_to_pb(_update(snapshot=False)), holds)
    assert [g.device for g in update.gpus] == [held, MIG]  # MIG-1 is new to it: read
    assert asked == [("node-a", "GPU-0"), ("node-a", "MIG-1")]
    asked.clear()
    snapshot = node_update_from_pb(node_update_to_pb(_update(snapshot=True)), holds)
    assert [g.device for g in snapshot.gpus] == [GPU, MIG] and asked == []
