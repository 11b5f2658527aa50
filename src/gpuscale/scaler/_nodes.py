"""What the cluster state holds of each node, as its agent last said it: the node (``NodeRecord``), its
GPUs with their samples in a ring (``GpuRecord``), its pods' engines with their readings (``EngineRecord``),
a node's status for ``/debug`` and the metrics (``NodeStatus``), and the engine readings of pods deleted a
moment ago (``Departed``); ``engine_series``: a pod's engine as the
answer reads it, or why there is nothing to read."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from ..model import DeviceInfo, EngineSample, EngineState, PodInfo
from ..scaling.engine import EngineSeries
from ..scaling.ring import SampleRing
from ..scaling.view import departed_kept

__all__ = [
    "DEPARTED_MAX",
    "Departed",
    "EngineRecord",
    "GpuRecord",
    "NodeRecord",
    "NodeStatus",
    "PodKey",
    "engine_series",
]

PodKey = tuple[str, str]  # (namespace, name)


class GpuRecord:
    __slots__ = ("carried", "device", "error", "node", "owners", "pods", "samples")

    def __init__(self, node: str, device: DeviceInfo, maxlen: int) -> None:
        self.node = node
        self.device = device
        self.samples = SampleRing(device.uuid, maxlen)
        self.error = ""
        self.pods: tuple[PodKey, ...] = ()
        self.owners: dict[int, PodKey] = {}  # pid → pod, from the newest sample
        self.carried = False  # its holders are a restarted agent's predecessor's, not confirmed yet

    def pids_of(self, pod: PodKey) -> frozenset[int] | None:
        if self.owners:
            return frozenset(pid for pid, owner in self.owners.items() if owner == pod)
        return None if len(self.pods) == 1 else frozenset()


class EngineRecord:
    """What the scaler holds of one GPU pod's inference engine: recent readings, and the newest failure."""

    __slots__ = ("missing", "node", "readings")

    def __init__(self, node: str, maxlen: int) -> None:
        self.node = node
        self.readings: collections.deque[EngineSample] = collections.deque(maxlen=maxlen)
        self.missing: tuple[str, str, float] | None = None  # (reason, detail, at)

    def take(self, e: EngineState) -> None:
        self.readings.extend(e.readings)
        newest = self.readings[-1].timestamp if self.readings else -1.0
        if e.missing is not None:
            self.missing = (e.missing.reason, e.missing.detail, e.missing.timestamp)
        elif e.readings:
            self.missing = None
        if self.missing is not None and self.missing[2] < newest:
            self.missing = None  # read again since


@dataclass(slots=True)
class NodeRecord:
    name: str
    agent_id: str
    interval: float
    gpus: dict[str, GpuRecord] = field(default_factory=dict)
    pods: dict[PodKey, PodInfo] = field(default_factory=dict)
    connected: bool = True
    last_message: float = 0.0  # monotonic
    disconnected_at: float = 0.0  # monotonic
    # a restarted agent whose view is not complete yet: the pods and attributions of its predecessor are kept
    carried: bool = False
    # an agent whose view is not complete yet, with no predecessor to carry from: its pods are not known
    incomplete: bool = False
    engines_supported: bool = False  # an older agent reads no engines
    engines: dict[PodKey, EngineRecord] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    name: str
    agent_id: str
    connected: bool
    gpus: int
    pods: int
    seconds_since_message: float


def engine_series(node: NodeRecord, key: PodKey) -> EngineSeries:
    """A pod's engine as its node's agent last said it (live readings), or why there is nothing to say."""
    pod = f"{key[0]}/{key[1]}"
    if not node.engines_supported:
        return EngineSeries(pod, (), f"the agent of {node.name} reads no engines (upgrade gpuscale agent)")
    engine = node.engines.get(key)
    if engine is None and node.carried:
        return EngineSeries(pod, (), f"the agent of {node.name} is restarting: its engines are not read yet")
    if engine is None:
        return EngineSeries(
            pod, (), "no engine endpoint (annotate the pod gpuscale.io/metrics-port, or prometheus.io/scrape)"
        )
    if engine.missing is not None:
        reason, detail, _ = engine.missing
        return EngineSeries(
            pod, engine.readings, f"engine not read: {reason}" + (f" ({detail})" if detail else "")
        )
    return EngineSeries(pod, engine.readings)


# How many deleted pods' engine readings are kept for the forecast's look-back (how long:
# ``view.departed_kept``).
DEPARTED_MAX = 10_000


class Departed:
    """Deleted pods' engine readings, by namespace, kept while ``view.departed_kept`` and at most
    ``DEPARTED_MAX`` of them (a mass deletion keeps the newest)."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[str, tuple[PodInfo, tuple[EngineSample, ...]]]] = {}

    def of(self, namespace: str) -> dict[str, tuple[PodInfo, tuple[EngineSample, ...]]]:
        """The namespace's deleted pods: name -> (the pod, its readings)."""
        return self._by_ns.get(namespace, {})

    def keep(self, key: PodKey, info: PodInfo, readings: tuple[EngineSample, ...], now: float) -> None:
        """Keep pod ``key``'s readings (Unix ``now``), dropping those no longer kept."""
        ns, name = key
        self._by_ns.setdefault(ns, {})[name] = (info, readings)
        total = 0
        for space in list(self._by_ns):
            kept = {k: v for k, v in self._by_ns[space].items() if departed_kept(v[1], now)}
            if kept:
                self._by_ns[space] = kept
                total += len(kept)
            else:
                del self._by_ns[space]
        if total > DEPARTED_MAX:  # a mass deletion: keep the newest
            flat = sorted(
                ((v[1][-1].timestamp, space, k) for space, d in self._by_ns.items() for k, v in d.items()),
                reverse=True,
            )
            for _, space, k in flat[DEPARTED_MAX:]:
                del self._by_ns[space][k]
