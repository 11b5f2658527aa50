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
from ..convert import node_update_to_pb
from ..model import Assignment, DeviceInfo, EngineState, GpuState, NodeUpdate
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
        state: NodeState,
        snapshot: bool,
        sent_ts: dict[tuple[str, str], float],
        sent_missing: dict[tuple[str, str], float],
    ) -> tuple[EngineState, ...]:
        """The engine readings and failures this stream has not sent yet (a snapshot: all it has). What it
        remembers of pods the agent no longer reads is dropped."""
        live = state.engine_history.keys() | state.engine_missing.keys()
        for old in [k for k in sent_ts if k not in live]:
            del sent_ts[old]
        for old in [k for k in sent_missing if k not in live]:
            del sent_missing[old]
        out = []
        for key in sorted(state.engine_history.keys() | state.engine_missing.keys()):
            after = sent_ts.get(key, -1.0)
            new = tuple(r for r in state.engine_history.get(key, ()) if r.timestamp > after)
            gone = state.engine_missing.get(key)
            failed = gone is not None and sent_missing.get(key) != gone.timestamp
            if not (snapshot or new or failed):
                continue
            out.append(EngineState(key[0], key[1], new, gone))
            if new:
                sent_ts[key] = new[-1].timestamp
            if gone is not None:
                sent_missing[key] = gone.timestamp
        return tuple(out)

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
            sent_at = self._clock()
            if snapshot:  # the first message, or the backend was re-opened with other GPUs: start over
                devices = state.devices
                cutoff = self._clock() - history
                sent_ts = {d.uuid: cutoff for d in devices}
                sent_state = {}
                engine_ts, engine_missing, engines_version = {}, {}, -1
            if not changed:  # a heartbeat
                yield node_update_to_pb(
                    NodeUpdate[GpuState](False, state.node_name, self._agent_id, seq, sent_at, self._interval)
                )
                continue
            gpus = []
            for view in state.snapshot.gpus:
                uuid = view.device.uuid
                new = state.samples_since(uuid, sent_ts.get(uuid, 0.0))
                now_state = (view.error, view.assignments)
                if not snapshot and not new and sent_state.get(uuid) == now_state:
                    continue
                error = view.error
                gpus.append(
                    GpuState(
                        view.device,
                        tuple(new),
                        state.owners.get(uuid, {}),
                        error_kind=error.kind if error is not None else "",
                        error_message=error.detail if error is not None else "",
                        assignments=view.assignments,
                    )
                )
                if new:
                    sent_ts[uuid] = new[-1].timestamp
                sent_state[uuid] = now_state
            send_pods = snapshot or state.pods_version != pods_version
            pods_version = state.pods_version
            engines: tuple[EngineState, ...] = ()
            if state.engines_version != engines_version:
                engines_version = state.engines_version
                engines = self._engines(state, snapshot, engine_ts, engine_missing)
            send_labels = snapshot or state.node_labels_version != labels_version
            labels_version = state.node_labels_version
            yield node_update_to_pb(
                NodeUpdate(
                    snapshot,
                    state.node_name,
                    self._agent_id,
                    seq,
                    sent_at,
                    self._interval,
                    gpus=tuple(gpus),
                    pods=tuple(state.pods.values()) if send_pods else (),
                    pods_changed=send_pods and not snapshot,
                    node_labels=dict(state.node_labels) if send_labels else {},
                    node_labels_changed=send_labels and not snapshot,
                    complete=state.complete,
                    engines_supported=True,
                    engines=engines,
                )
            )
