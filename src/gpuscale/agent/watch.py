"""Export: ``gpuscale.v1.Agent/Watch``, the stream the cluster scaler follows.

On connect, a SNAPSHOT of the node; then an UPDATE after every change (a sampling round, new attribution, new
pods, new node labels), or an empty UPDATE as a heartbeat when nothing changed for a few intervals, so a
client can tell a quiet agent from a partitioned one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc

from .._proto import agent_pb2, agent_pb2_grpc
from ..backends.errors import DeviceError
from ..convert import assignment_to_pb, device_to_pb, engine_reading_to_pb, pods_to_pb, sample_to_pb
from ..model import Assignment, DeviceInfo
from .exporter import AgentMetrics
from .state import NodeState

__all__ = ["WatchService"]

log = logging.getLogger(__name__)


class WatchService(agent_pb2_grpc.AgentServicer):
    def __init__(
        self,
        state: NodeState,
        *,
        agent_id: str,
        interval: float,
        history_seconds: float,
        metrics: AgentMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._state = state
        self._agent_id = agent_id
        self._interval = interval
        self._history = history_seconds
        self._metrics = metrics
        self._clock = clock

    def _message(self, kind: agent_pb2.NodeUpdate.Kind.ValueType, seq: int) -> agent_pb2.NodeUpdate:
        return agent_pb2.NodeUpdate(
            kind=kind,
            node_name=self._state.node_name,
            agent_id=self._agent_id,
            sequence=seq,
            sent_at=self._clock(),
            interval_seconds=self._interval,
        )

    async def Watch(
        self, request: agent_pb2.WatchRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[agent_pb2.NodeUpdate]:
        history = min(float(request.history_seconds or self._history), self._history)
        peer = request.client or context.peer()
        log.info("Watch stream opened by %s", peer)
        self._metrics.watch_streams.inc()
        try:
            async for msg in self._stream(history):
                yield msg
        finally:
            self._metrics.watch_streams.dec()
            log.info("Watch stream of %s closed", peer)

    @staticmethod
    def _engines(
        msg: agent_pb2.NodeUpdate,
        state: NodeState,
        snapshot: bool,
        sent_ts: dict[tuple[str, str], float],
        sent_missing: dict[tuple[str, str], float],
    ) -> None:
        """The engine readings and failures this stream has not sent yet (a snapshot: all it has). What it
        remembers of pods the agent no longer reads is dropped."""
        live = state.engine_history.keys() | state.engine_missing.keys()
        for old in [k for k in sent_ts if k not in live]:
            del sent_ts[old]
        for old in [k for k in sent_missing if k not in live]:
            del sent_missing[old]
        for key in sorted(state.engine_history.keys() | state.engine_missing.keys()):
            after = sent_ts.get(key, -1.0)
            new = [r for r in state.engine_history.get(key, ()) if r.timestamp > after]
            gone = state.engine_missing.get(key)
            failed = gone is not None and sent_missing.get(key) != gone.timestamp
            if not (snapshot or new or failed):
                continue
            e = msg.engines.add(namespace=key[0], pod=key[1])
            e.readings.extend(engine_reading_to_pb(r) for r in new)
            if new:
                sent_ts[key] = new[-1].timestamp
            if gone is not None:
                e.missing_reason, e.missing_detail, e.missing_at = gone.reason, gone.detail, gone.timestamp
                sent_missing[key] = gone.timestamp

    async def _stream(self, history: float) -> AsyncIterator[agent_pb2.NodeUpdate]:
        state = self._state
        seq = 0
        version = -1
        devices: tuple[DeviceInfo, ...] | None = None
        pods_version = -1
        labels_version = -1
        sent_ts: dict[str, float] = {}
        engines_version = -1
        engine_ts: dict[tuple[str, str], float] = {}
        engine_missing: dict[tuple[str, str], float] = {}
        sent_state: dict[str, tuple[DeviceError | None, tuple[Assignment, ...]]] = {}
        while True:
            if version >= 0:
                changed = await state.wait_changed(version, timeout=max(3 * self._interval, 1.0))
            else:
                changed = True
            version = state.version
            seq += 1
            snapshot = state.devices != devices
            changed = changed or snapshot  # a snapshot is always whole
            if snapshot:  # the first message, or the backend was re-opened with other GPUs: start over
                msg = self._message(agent_pb2.NodeUpdate.SNAPSHOT, seq)
                devices = state.devices
                cutoff = self._clock() - history
                sent_ts = {d.uuid: cutoff for d in devices}
                sent_state = {}
                engine_ts, engine_missing, engines_version = {}, {}, -1
            else:
                msg = self._message(agent_pb2.NodeUpdate.UPDATE, seq)
            if changed:
                for view in state.snapshot.gpus:
                    uuid = view.device.uuid
                    new = state.samples_since(uuid, sent_ts.get(uuid, 0.0))
                    now_state = (view.error, view.assignments)
                    if not snapshot and not new and sent_state.get(uuid) == now_state:
                        continue
                    g = msg.gpus.add(device=device_to_pb(view.device))
                    owners = state.owners.get(uuid, {})
                    for s in new:
                        g.samples.append(sample_to_pb(s, owners))
                        sent_ts[uuid] = s.timestamp
                    if view.error is not None:
                        g.error_kind, g.error_message = view.error.kind, view.error.detail
                    g.attributions.extend(assignment_to_pb(a) for a in view.assignments)
                    sent_state[uuid] = now_state
                if snapshot or state.pods_version != pods_version:
                    msg.pods_changed = not snapshot
                    msg.pods.extend(pods_to_pb(state.pods.values()))
                    pods_version = state.pods_version
                msg.complete = state.complete
                msg.engines_supported = True
                if state.engines_version != engines_version:
                    engines_version = state.engines_version
                    self._engines(msg, state, snapshot, engine_ts, engine_missing)
                if snapshot or state.node_labels_version != labels_version:
                    msg.node_labels_changed = not snapshot
                    msg.node_labels.update(state.node_labels)
                    labels_version = state.node_labels_version
            yield msg
