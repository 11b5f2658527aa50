"""The cluster scaler's live, in-memory view of every agent's node: GPUs with their recent samples, who holds
each GPU, and the pods (with labels, and whether they are Ready and since when) each agent reports.

Fed by ``apply(NodeUpdate)`` from the subscribers (one writer: the event loop); read by the service. Built for
fast answers:

* GPUs are indexed by the pod they are attributed to, pods by namespace;
* a query's ``Selection`` (the matching GPUs, as ``GpuSeries`` that hold the live sample deques) is cached
  and reused until a pod, an attribution or a process owner changes in its namespace (or a node is replaced);
* each ``ChangeFeed`` (a ``StreamIsActive``) is woken only by updates that touch its GPUs or its namespace.

A node whose stream is gone keeps its data, marked stale: its samples simply age past ``staleAfter``, so the
calls that depend on them fail with ``UNAVAILABLE`` instead of silently losing the node's pods. A node that
stays disconnected longer than ``forget_after`` is forgotten (``sweep``).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterable, Mapping

from .._proto import agent_pb2
from ..convert import node_update_from_pb
from ..model import DeviceInfo, GpuRows, NodeUpdate, PodInfo
from ..scaling.aggregate import GpuSeries
from ..scaling.engine import EngineSeries
from ..scaling.profiles import Scope
from ..scaling.view import GpuPod
from ._nodes import Departed, EngineRecord, GpuRecord, NodeRecord, NodeStatus, PodKey, engine_series
from .source import PodStart, Query, Selection

__all__ = ["ClusterState", "NodeStatus"]

_HOSTNAME_LABEL = "kubernetes.io/hostname"
_MAX_CACHED = 8192


class _Feed:
    def __init__(self, state: ClusterState, query: Query) -> None:
        self._state = state
        self.namespace = query.namespace if query.scope == "workload" else None
        self.uuids: frozenset[str] = frozenset()
        self.event = asyncio.Event()

    def follow(self, uuids: frozenset[str]) -> None:
        self._state._index_feed(self, self.uuids, uuids)
        self.uuids = uuids

    async def wait(self) -> None:
        await self.event.wait()
        self.event.clear()

    def close(self) -> None:
        self._state._unindex_feed(self)


class ClusterState:
    """Every agent's node, indexed for queries. ``history_s`` bounds the samples kept per GPU."""

    def __init__(self, *, history_s: float = 120.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.history_s = history_s
        self._monotonic = monotonic
        self._nodes: dict[str, NodeRecord] = {}
        self._node_labels: dict[str, Mapping[str, str]] = {}
        self._gpus_by_pod: dict[PodKey, dict[str, GpuRecord]] = {}
        self._pods_by_ns: dict[str, dict[str, PodInfo]] = {}
        self._pod_nodes: dict[PodKey, set[str]] = {}
        # GPU pods of forgotten nodes, by namespace: name -> (node, pod, monotonic time forgotten). They stay
        # missing pods of their workloads (never a silent 0) until an agent reports them again or another
        # forget_after passes.
        self._forgotten: dict[str, dict[str, tuple[str, PodInfo, float]]] = {}
        # pods deleted with engine readings, kept for the scale-ahead forecast's look-back (so a scale-down
        # does not read as a rise): namespace -> pod -> (its info, its readings)
        self._departed = Departed()
        self._ns_version: collections.Counter[str] = collections.Counter()
        self._version = 0  # bumped when a node is replaced, added or forgotten
        self._cache: dict[Query, tuple[int, int, Selection]] = {}
        self._feeds: set[_Feed] = set()
        # who to wake, by GPU and by namespace: an update looks up its GPUs, not every open stream
        self._feeds_by_uuid: dict[str, set[_Feed]] = {}
        self._feeds_by_ns: dict[str, set[_Feed]] = {}
        self.updates = 0
        self.discovery_note: str | None = None  # why discovery found no agent, when it can tell

    # -- reading ---------------------------------------------------------------------------------------
    def scope_problem(self, scope: Scope) -> str | None:
        if scope == "node":
            return (
                'scope "node" is answered by the agent of that node (gpuscale agent '
                '--serve-external-scaler); the cluster scaler answers scopes "workload" and "pool"'
            )
        return None

    def problem(self) -> str | None:
        if not self._nodes:
            note = f"; {self.discovery_note}" if self.discovery_note else ""
            return f"no agent has sent its state yet{note}"
        return None

    def select(self, query: Query) -> Selection:
        ns_version = self._ns_version[query.namespace] if query.namespace is not None else 0
        cached = self._cache.get(query)
        if cached is not None and cached[0] == self._version and cached[1] == ns_version:
            return cached[2]
        if query.scope == "workload":
            selection = self._select_workload(query)
        elif query.scope == "pool":
            selection = self._select_pool(query)
        else:
            selection = self._select_nodes(self._nodes.values())
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[query] = (self._version, ns_version, selection)
        return selection

    def _select_workload(self, query: Query) -> Selection:
        ns = query.namespace or ""
        selector = query.pod_selector
        series: list[GpuSeries] = []
        gpu_pods: list[GpuPod] = []
        engines: list[EngineSeries] = []
        started: list[PodStart] = []
        pods = 0
        for name, info in self._pods_by_ns.get(ns, {}).items():
            if selector is not None and not selector.matches(info.labels):
                continue
            pods += 1
            key = (ns, name)
            if info.wants_gpu is True:
                nodes = sorted(self._pod_nodes.get(key, ()))
                node = self._nodes.get(nodes[0]) if nodes else None
                connected = any(n in self._nodes and self._nodes[n].connected for n in nodes)
                where = node.name if node else "?"
                gpu_pods.append(GpuPod(f"{ns}/{name}", where, connected, ready=info.ready))
                if node is not None:
                    engines.append(engine_series(node, key))
                if info.scheduled_at is not None and info.ready_at is not None:
                    started.append(PodStart(f"{ns}/{name}", info.scheduled_at, info.ready_at))
            for uuid, gpu in self._gpus_by_pod.get(key, {}).items():
                series.append(
                    GpuSeries(
                        uuid,
                        gpu.samples,
                        pod=f"{ns}/{name}",
                        pids=gpu.pids_of(key),
                        attributed=frozenset(gpu.owners),
                    )
                )
        present = self._pods_by_ns.get(ns, {})
        for name, (info, readings) in self._departed.of(ns).items():
            if name not in present and (selector is None or selector.matches(info.labels)):
                engines.append(EngineSeries(f"{ns}/{name}", readings, departed=True))
        for name, (node_name, info, _) in self._forgotten.get(ns, {}).items():
            if selector is None or selector.matches(info.labels):
                pods += 1
                gpu_pods.append(GpuPod(f"{ns}/{name}", node_name, connected=False, forgotten=True))
        uuids = frozenset(s.uuid for s in series)
        return Selection(tuple(series), pods, uuids, tuple(gpu_pods), tuple(engines), tuple(started))

    def _select_pool(self, query: Query) -> Selection:
        selector = query.node_selector
        nodes = [
            n for n in self._nodes.values() if selector is None or selector.matches(self.node_labels(n.name))
        ]
        return self._select_nodes(nodes)

    @staticmethod
    def _select_nodes(nodes: Iterable[NodeRecord]) -> Selection:
        series = tuple(GpuSeries(u, g.samples) for n in nodes for u, g in n.gpus.items())
        return Selection(series, 0, frozenset(s.uuid for s in series))

    def feed(self, query: Query) -> _Feed:
        f = _Feed(self, query)
        self._feeds.add(f)
        if f.namespace is not None:
            self._feeds_by_ns.setdefault(f.namespace, set()).add(f)
        return f

    def _index_feed(self, f: _Feed, old: frozenset[str], new: frozenset[str]) -> None:
        for uuid in old - new:
            _discard(self._feeds_by_uuid, uuid, f)
        for uuid in new - old:
            self._feeds_by_uuid.setdefault(uuid, set()).add(f)

    def _unindex_feed(self, f: _Feed) -> None:
        if f not in self._feeds:
            return
        self._feeds.discard(f)
        self._index_feed(f, f.uuids, frozenset())
        if f.namespace is not None:
            _discard(self._feeds_by_ns, f.namespace, f)

    def node_labels(self, node: str) -> Mapping[str, str]:
        return self._node_labels.get(node) or {_HOSTNAME_LABEL: node}

    def set_node_labels(self, node: str, labels: Mapping[str, str]) -> None:
        """The node's labels for ``pool`` scope, as its agent read them from its Node (default, and while the
        agent sends none: only ``kubernetes.io/hostname=<node>``)."""
        if self._take_labels(node, labels):
            self._bump_all()

    def _take_labels(self, node: str, labels: Mapping[str, str]) -> bool:
        new = {_HOSTNAME_LABEL: node, **labels}
        if dict(self.node_labels(node)) == new:
            return False
        self._node_labels[node] = new
        return True

    def node_count(self) -> int:
        return len(self._nodes)

    def follows(self, node: str) -> bool:
        n = self._nodes.get(node)
        return n is not None and n.connected and not n.incomplete and not n.carried

    def nodes(self) -> list[NodeStatus]:
        now = self._monotonic()
        return [
            NodeStatus(n.name, n.agent_id, n.connected, len(n.gpus), len(n.pods), now - n.last_message)
            for n in self._nodes.values()
        ]

    @property
    def stale_nodes(self) -> int:
        return sum(not n.connected for n in self._nodes.values())

    @property
    def cached_selections(self) -> int:
        return len(self._cache)

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    # -- writing (the event loop only) -----------------------------------------------------------------
    def apply(self, msg: agent_pb2.NodeUpdate) -> None:
        """Apply one Watch message (``read``, then ``apply_update``)."""
        self.apply_update(self.read(msg))

    def read(self, msg: agent_pb2.NodeUpdate) -> NodeUpdate[GpuRows]:
        """One Watch message as this state applies it: the devices it holds are not read again."""
        return node_update_from_pb(msg, self._held_device)

    def _held_device(self, node_name: str, uuid: str) -> DeviceInfo | None:
        node = self._nodes.get(node_name)
        gpu = node.gpus.get(uuid) if node is not None else None
        return gpu.device if gpu is not None else None

    def apply_update(self, msg: NodeUpdate[GpuRows]) -> None:
        """Apply one Watch message, as ``read`` reads it. A snapshot replaces what was known of the node; an
        update adds to it (and is ignored unless it continues the snapshot of the same agent process)."""
        self.updates += 1
        node = self._nodes.get(msg.node_name)
        if msg.snapshot:
            self._snapshot(msg, node)
        elif node is not None and node.agent_id == msg.agent_id:
            self._update(msg, node)
            node.connected = True
            node.last_message = self._monotonic()

    def mark_disconnected(self, node_name: str, agent_id: str) -> None:
        """The stream of that agent process ended: its node's data is stale from now on."""
        node = self._nodes.get(node_name)
        if node is not None and node.agent_id == agent_id and node.connected:
            node.connected = False
            node.disconnected_at = self._monotonic()
            self._version += 1  # its pods are now missing pods of their workloads
            self._wake(set(node.gpus), set(), False)

    def sweep(self, forget_after: float) -> list[str]:
        """Forget nodes disconnected for longer than ``forget_after`` seconds; return their names."""
        now = self._monotonic()
        gone = [
            n.name for n in self._nodes.values() if not n.connected and now - n.disconnected_at > forget_after
        ]
        for name in gone:
            node = self._nodes.pop(name)
            self._unindex_node(node)
            self._node_labels.pop(name, None)
            for (ns, pod), info in node.pods.items():
                if info.wants_gpu is True and (ns, pod) not in self._pod_nodes:
                    self._forgotten.setdefault(ns, {})[pod] = (name, info, now)
        expired = False
        for ns in list(self._forgotten):
            kept = {k: v for k, v in self._forgotten[ns].items() if now - v[2] <= forget_after}
            expired = expired or len(kept) != len(self._forgotten[ns])
            if kept:
                self._forgotten[ns] = kept
            else:
                del self._forgotten[ns]
        if gone or expired:
            self._bump_all()
        return gone

    @property
    def incomplete_nodes(self) -> list[str]:
        """Nodes whose agent has not yet read its pods and the kubelet, with nothing known from before."""
        return sorted(n.name for n in self._nodes.values() if n.incomplete)

    @property
    def forgotten_pods(self) -> int:
        """GPU pods of forgotten nodes still counted as missing."""
        return sum(len(v) for v in self._forgotten.values())

    def _snapshot(self, msg: NodeUpdate[GpuRows], old: NodeRecord | None) -> None:
        if old is not None:
            self._unindex_node(old)
        interval = msg.interval_seconds if msg.interval_seconds > 0 else 1.0
        node = NodeRecord(msg.node_name, msg.agent_id, interval, last_message=self._monotonic())
        # An agent that has not read its pods and the kubelet yet (just restarted) says so: keep what its
        # predecessor said of them until it has, so a restart changes no answer.
        carry = old is not None and msg.complete is False
        node.carried = carry
        # a carried view is only as complete as the one it carries (an agent restarting twice before it has
        # read its pods carries nothing)
        node.incomplete = (old.incomplete if carry and old is not None else False) or (
            not carry and msg.complete is False
        )
        maxlen = max(2, int(self.history_s / interval) + 2)
        for g in msg.gpus:
            gpu = GpuRecord(node.name, g.device, maxlen)
            node.gpus[gpu.device.uuid] = gpu
            self._gpu_state(gpu, g)
            if carry and not gpu.pods:
                before = old.gpus.get(gpu.device.uuid) if old is not None else None
                if before is not None and before.pods:
                    gpu.pods, gpu.owners, gpu.carried = before.pods, dict(before.owners), True
            self._index_gpu(gpu)
        pods = old.pods.values() if carry and old is not None else msg.pods
        for info in pods:
            node.pods[(info.namespace, info.name)] = info
            self._index_pod(node.name, info)
        if msg.node_labels:  # none: the agent has not read its Node yet (just started): keep what was known
            self._take_labels(node.name, msg.node_labels)
        node.engines_supported = msg.engines_supported
        for e in msg.engines:
            engine = node.engines[(e.namespace, e.pod)] = EngineRecord(node.name, maxlen)
            engine.take(e)
        self._nodes[node.name] = node
        self._bump_all()

    def _update(self, msg: NodeUpdate[GpuRows], node: NodeRecord) -> None:
        namespaces: set[str] = set()
        uuids: set[str] = set()
        maxlen = max(2, int(self.history_s / node.interval) + 2)
        added = False
        if node.incomplete and msg.complete is True:
            node.incomplete = False
        if node.carried and msg.complete is True:
            node.carried = False  # the new agent's view is whole: from here on its word is the node's
            for held in node.gpus.values():
                if held.carried:  # the new agent never named a holder: it has none
                    self._unindex_gpu(held)
                    held.pods, held.owners, held.carried = (), {}, False
            self._version += 1
            added = True
        for g in msg.gpus:
            uuid = g.device.uuid
            uuids.add(uuid)
            gpu = node.gpus.get(uuid)
            if gpu is None:  # a GPU that appeared without a new snapshot
                gpu = node.gpus[uuid] = GpuRecord(node.name, g.device, maxlen)
                self._version += 1
                added = True
            pods, owners = gpu.pods, gpu.owners
            self._gpu_state(gpu, g)
            if node.carried and not gpu.pods:  # not attributed yet by the new agent: keep the carried one
                gpu.pods, gpu.owners = pods, owners
            elif gpu.pods:
                gpu.carried = False
            if gpu.pods != pods or gpu.owners != owners:  # who holds the GPU changed: re-index it
                self._unindex_gpu(gpu, pods)
                self._index_gpu(gpu)
                namespaces.update(ns for ns, _ in (*pods, *gpu.pods))
                namespaces.update(ns for ns, _ in (*owners.values(), *gpu.owners.values()))
        if msg.pods_changed and not node.carried:
            old_pods = node.pods
            new = {(p.namespace, p.name): p for p in msg.pods}
            for key, info in node.pods.items():
                if new.get(key) != info:
                    self._unindex_pod(node.name, info)
                    namespaces.add(key[0])
            for key, info in new.items():
                if node.pods.get(key) != info:
                    self._index_pod(node.name, info)
                    namespaces.add(key[0])
            node.pods = new
            for gone in [k for k in node.engines if k not in new]:
                left = node.engines.pop(gone)  # its readings went with the pod, but for the look-back
                was = old_pods.get(gone)
                if was is not None and left.readings:
                    self._departed.keep(gone, was, tuple(left.readings), msg.sent_at)
        for e in msg.engines:
            key = (e.namespace, e.pod)
            engine = node.engines.get(key)
            if engine is None:
                engine = node.engines[key] = EngineRecord(node.name, maxlen)
            engine.take(e)
            namespaces.add(e.namespace)
        if msg.node_labels_changed and self._take_labels(node.name, msg.node_labels):
            self._version += 1  # which nodes a pool selects may have changed
            added = True
        for ns in namespaces:
            self._ns_version[ns] += 1
        self._wake(uuids, namespaces, added)

    @staticmethod
    def _gpu_state(gpu: GpuRecord, g: GpuRows) -> None:
        """Add ``g``'s samples to ``gpu``; take its error, holders and process owners (newest sample's)."""
        for timestamp, values, processes in g.rows:
            gpu.samples.append(timestamp, values, processes)
        if g.rows:
            gpu.owners = {pid: (ref.namespace, ref.pod) for pid, ref in g.owners.items()}
        gpu.error = g.error_message or g.error_kind
        gpu.pods = tuple(dict.fromkeys(g.holders))

    # -- indexes ---------------------------------------------------------------------------------------
    def _index_gpu(self, gpu: GpuRecord) -> None:
        for key in gpu.pods:
            self._gpus_by_pod.setdefault(key, {})[gpu.device.uuid] = gpu

    def _unindex_gpu(self, gpu: GpuRecord, pods: tuple[PodKey, ...] | None = None) -> None:
        """Drop ``gpu`` from the pods that held it (``pods``; default: those it names now)."""
        for key in gpu.pods if pods is None else pods:
            held = self._gpus_by_pod.get(key)
            if held is not None and held.get(gpu.device.uuid) is gpu:
                del held[gpu.device.uuid]
                if not held:
                    del self._gpus_by_pod[key]

    def _index_pod(self, node: str, info: PodInfo) -> None:
        key = (info.namespace, info.name)
        lost = self._forgotten.get(info.namespace)
        if lost is not None and lost.pop(info.name, None) is not None and not lost:
            del self._forgotten[info.namespace]
        self._pods_by_ns.setdefault(info.namespace, {})[info.name] = info
        self._pod_nodes.setdefault(key, set()).add(node)

    def _unindex_pod(self, node: str, info: PodInfo) -> None:
        key = (info.namespace, info.name)
        nodes = self._pod_nodes.get(key)
        if nodes is None:
            return
        nodes.discard(node)
        if nodes:  # another node still reports it (a pod moving, seen by both for a moment)
            other = self._nodes.get(next(iter(nodes)))
            if other is not None and key in other.pods:
                self._pods_by_ns.setdefault(info.namespace, {})[info.name] = other.pods[key]
            return
        del self._pod_nodes[key]
        in_ns = self._pods_by_ns.get(info.namespace)
        if in_ns is not None:
            in_ns.pop(info.name, None)
            if not in_ns:
                del self._pods_by_ns[info.namespace]

    def _unindex_node(self, node: NodeRecord) -> None:
        for gpu in node.gpus.values():
            self._unindex_gpu(gpu)
        for info in node.pods.values():
            self._unindex_pod(node.name, info)

    def _bump_all(self) -> None:
        self._version += 1
        self._wake(set(), set(), True)

    def _wake(self, uuids: set[str], namespaces: set[str], everything: bool) -> None:
        if everything:
            woken: Iterable[_Feed] = self._feeds
        else:
            found: set[_Feed] = set()
            for ns in namespaces:
                found.update(self._feeds_by_ns.get(ns, ()))
            for uuid in uuids:
                found.update(self._feeds_by_uuid.get(uuid, ()))
            woken = found
        for f in woken:
            f.event.set()


def _discard(index: dict[str, set[_Feed]], key: str, f: _Feed) -> None:
    held = index.get(key)
    if held is not None:
        held.discard(f)
        if not held:
            del index[key]
