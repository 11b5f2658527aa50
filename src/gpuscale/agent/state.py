"""What the agent knows about its node, in memory: devices, recent samples, errors, and who holds each GPU.

One writer (the agent's event loop) applies changes; readers in other threads (the ``/metrics`` collector)
read ``snapshot``, an immutable view swapped in whole after each change.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..backends.errors import DeviceError
from ..model import Assignment, ContainerRef, DeviceInfo, EngineMissing, EngineSample, GpuSample, PodInfo

__all__ = ["GpuView", "NodeSnapshot", "NodeState"]


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU as last seen: its latest good sample (``None`` before the first), and the error of the last
    read if it failed (the sample then ages)."""

    device: DeviceInfo
    latest: GpuSample | None
    error: DeviceError | None
    assignments: tuple[Assignment, ...]
    # pid → container, for the processes of ``latest``
    owners: Mapping[int, ContainerRef] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    node_name: str
    gpus: tuple[GpuView, ...]
    pods: Mapping[tuple[str, str], PodInfo]
    taken_at: float
    rounds: int


class NodeState:
    """The agent's live state. Mutated only from the event loop; ``snapshot`` is safe from any thread."""

    def __init__(self, node_name: str, history_length: int) -> None:
        self.node_name = node_name
        self._history_length = history_length
        self.devices: tuple[DeviceInfo, ...] = ()
        self.history: dict[str, collections.deque[GpuSample]] = {}
        self.errors: dict[str, DeviceError | None] = {}
        self.assignments: dict[str, tuple[Assignment, ...]] = {}
        self.owners: dict[str, dict[int, ContainerRef]] = {}
        self.pods: dict[tuple[str, str], PodInfo] = {}
        self.rounds = 0
        self.version = 0  # bumped on every change; Watch streams wait on it
        self.pods_version = 0
        self.node_labels: dict[str, str] = {}  # from the Node object; empty while unknown
        self.node_labels_version = 0
        # False until the pod list is synced and the kubelet's assignments read once (``set_complete``):
        # what the Watch stream sends before that is not the node's whole view, and it says so
        self.complete = True
        # each GPU pod's inference engine (agent.engines): its recent readings, and why its newest scrape
        # failed (when it did); replaced after every engine round
        self.engine_history: dict[tuple[str, str], Sequence[EngineSample]] = {}
        self.engine_missing: dict[tuple[str, str], EngineMissing] = {}
        self.engines_version = 0
        self.snapshot = NodeSnapshot(node_name, (), {}, 0.0, 0)
        self._changed = asyncio.Condition()

    # -- writers (event loop) ----------------------------------------------------------------------------
    def set_devices(self, devices: Sequence[DeviceInfo]) -> None:
        self.devices = tuple(devices)
        known = {d.uuid for d in devices}
        for uuid in known - self.history.keys():
            self.history[uuid] = collections.deque(maxlen=self._history_length)
        for uuid in set(self.history) - known:
            del self.history[uuid]
            self.errors.pop(uuid, None)
        # Publish at once: a Watch client connecting before the first round sees the GPUs (no samples yet).
        self._publish(self.snapshot.taken_at)

    def record_round(
        self,
        now: float,
        samples: Mapping[str, GpuSample],
        errors: Mapping[str, DeviceError],
        owners: Mapping[str, dict[int, ContainerRef]],
    ) -> None:
        for uuid, sample in samples.items():
            if uuid in self.history:
                self.history[uuid].append(sample)
                self.errors[uuid] = None
        for uuid, err in errors.items():
            self.errors[uuid] = err
        self.owners.update(owners)
        self.rounds += 1
        self._publish(now)

    def set_assignments(self, now: float, assignments: Mapping[str, tuple[Assignment, ...]]) -> bool:
        if dict(assignments) == self.assignments:
            return False
        self.assignments = dict(assignments)
        self._publish(now)
        return True

    def set_pods(self, now: float, pods: Mapping[tuple[str, str], PodInfo]) -> bool:
        if dict(pods) == self.pods:
            return False
        self.pods = dict(pods)
        self.pods_version += 1
        self._publish(now)
        return True

    def set_complete(self, now: float, complete: bool) -> None:
        """Whether the pods and attributions held are the node's whole view. Turning complete re-sends the
        pods (``pods_version``), so a Watch client gets them with the message that says so."""
        if complete == self.complete:
            return
        self.complete = complete
        if complete:
            self.pods_version += 1
        self._publish(now)

    def set_engines(
        self,
        now: float,
        history: Mapping[tuple[str, str], Sequence[EngineSample]],
        missing: Mapping[tuple[str, str], EngineMissing],
    ) -> None:
        """After an engine round: every scraped pod's readings and the pods whose newest scrape failed."""
        self.engine_history = dict(history)
        self.engine_missing = dict(missing)
        self.engines_version += 1
        self._publish(now)

    def set_node_labels(self, now: float, labels: Mapping[str, str]) -> bool:
        if dict(labels) == self.node_labels:
            return False
        self.node_labels = dict(labels)
        self.node_labels_version += 1
        self._publish(now)
        return True

    def _publish(self, now: float) -> None:
        views = []
        for d in self.devices:
            hist = self.history.get(d.uuid)
            views.append(
                GpuView(
                    device=d,
                    latest=hist[-1] if hist else None,
                    error=self.errors.get(d.uuid),
                    assignments=self.assignments.get(d.uuid, ()),
                    owners=dict(self.owners.get(d.uuid, {})),
                )
            )
        self.snapshot = NodeSnapshot(self.node_name, tuple(views), dict(self.pods), now, self.rounds)
        self.version += 1
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_changed(self, seen_version: int, timeout: float) -> bool:
        """Wait until ``version`` passes ``seen_version`` (True) or ``timeout`` seconds pass (False)."""
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that races the
        # wake-up, and a Watch handler that misses its cancel keeps the gRPC server from stopping.
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: self.version > seen_version)
        except TimeoutError:
            return False
        return True

    def samples_since(self, uuid: str, after: float) -> list[GpuSample]:
        hist = self.history.get(uuid)
        if not hist:
            return []
        return [s for s in hist if s.timestamp > after]
