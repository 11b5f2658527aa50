"""The ingest worker's side of the pipe: what it writes is what the scaler reads back, in order, batched."""

from __future__ import annotations

import asyncio

from gpuscale._proto import agent_pb2
from gpuscale.scaler.ingest import FrameWriter


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.unread = 0  # bytes written that the reader has not taken

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.unread += len(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return self.unread


def frames(data: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    while data:
        n = int.from_bytes(data[1:5], "big")
        out.append((data[:1], data[5 : 5 + n]))
        data = data[5 + n :]
    return out


async def test_frames_are_batched_and_read_back_in_order() -> None:
    t = Transport()
    pipe = FrameWriter(t, flush_s=0.05)  # type: ignore[arg-type]
    msg = agent_pb2.NodeUpdate(kind=agent_pb2.NodeUpdate.UPDATE, node_name="node-a", agent_id="a1")
    pipe.apply(msg)
    pipe.agent_reconnect("silent")
    pipe.mark_disconnected("node-a", "a1")
    assert t.writes == []  # nothing yet: one write per batch
    await asyncio.sleep(0.1)
    (batch,) = t.writes
    assert frames(batch) == [(b"U", msg.SerializeToString()), (b"R", b"silent"), (b"D", b"node-a\0a1")]
    assert agent_pb2.NodeUpdate.FromString(frames(batch)[0][1]) == msg


async def test_a_large_batch_is_written_at_once() -> None:
    t = Transport()
    pipe = FrameWriter(t, flush_s=10.0, max_bytes=1000)  # type: ignore[arg-type]
    big = agent_pb2.NodeUpdate(node_name="n" * 2000)
    pipe.apply(big)
    assert len(t.writes) == 1 and frames(t.writes[0])[0][1] == big.SerializeToString()
    pipe.agent_reconnect("ended")
    pipe.flush()  # what the worker does on its way out
    assert frames(t.writes[1]) == [(b"R", b"ended")]


def test_a_scaler_that_stops_reading_makes_the_worker_give_up_rather_than_drop_messages() -> None:
    t = Transport()
    gave_up: list[int] = []
    pipe = FrameWriter(t, flush_s=10.0, max_bytes=100, max_backlog=1000, on_backlog=gave_up.append)  # type: ignore[arg-type]
    msg = agent_pb2.NodeUpdate(node_name="n" * 200)
    for _ in range(4):
        pipe.apply(msg)  # each one over max_bytes: written at once
    assert gave_up == []  # about 820 bytes unread: still within the backlog allowed
    t.unread = 0  # the scaler read them
    for _ in range(6):
        pipe.apply(msg)
    assert gave_up and gave_up[0] > 1000  # nothing dropped: everything written, then the worker gives up
    assert len(t.writes) == 10
