"""``EngineCollector``: each round, the engine sample (or why there is none) of every GPU pod of this node
that serves one, and a short history per pod. Discovery → scrape → parse → map, with bounded memory.

Memory stays bounded: a pod's history is a ring of ``history_length`` samples; a pod that no longer holds a
GPU of this node, or whose annotations stop asking for a scrape, is dropped with its history and its log
state; a pod that comes back under the same name with another UID starts a new history (its engine's
counters started over).

Logs are rate-limited per pod: a warning when a pod's engine data goes missing (or its reason changes), then
at most every ``say_again_s`` while it stays missing, and one info line when it reads again.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from ...model import EngineMissing, EngineSample, PodInfo
from .discovery import Endpoint, EndpointProblem, PodKey, discover
from .scrape import Scraper, ScrapeSettings

__all__ = ["EngineCollector", "EngineResult"]

log = logging.getLogger(__name__)

EngineResult = EngineSample | EngineMissing


@dataclass(slots=True)
class _Said:
    what: str  # the reason (or notes) last logged
    at: float


class EngineCollector:
    """The engines of this node's GPU pods. ``await scrape_round(pods, holders)`` once per sampling interval;
    read ``latest`` and ``history``; ``await close()`` at the end."""

    def __init__(
        self,
        settings: ScrapeSettings,
        registry: CollectorRegistry,
        *,
        history_length: int = 120,
        say_again_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.scraper = Scraper(settings, registry, clock=clock)
        self.history_length = history_length
        self.say_again_s = say_again_s
        self._clock = clock
        self._history: dict[PodKey, collections.deque[EngineSample]] = {}
        self._uids: dict[PodKey, str] = {}
        self._said: dict[PodKey, _Said] = {}
        self.latest: dict[PodKey, EngineResult] = {}
        self.endpoints: dict[PodKey, Endpoint | EndpointProblem] = {}

    def history(self, key: PodKey) -> Sequence[EngineSample]:
        """The pod's samples, oldest first (missing rounds leave no sample)."""
        return tuple(self._history.get(key, ()))

    async def scrape_round(
        self, pods: Mapping[PodKey, PodInfo], holders: Collection[PodKey]
    ) -> dict[PodKey, EngineResult]:
        """Scrape every pod of ``pods`` that is in ``holders`` (pods holding a GPU of this node: only those
        are ever scraped) and asks for it; the result per pod."""
        found = discover(pods, holders)
        self.endpoints = found
        now = self._clock()
        results: dict[PodKey, EngineResult] = {}
        for key, problem in found.items():
            if isinstance(problem, EndpointProblem):
                self.scraper.count("no_endpoint")
                results[key] = EngineMissing(now, "no_endpoint", problem.reason)
        endpoints = {k: e for k, e in found.items() if isinstance(e, Endpoint)}
        results.update(await self.scraper.scrape_all(endpoints))
        self._forget(set(found))
        for key, result in results.items():
            pod = pods[key]
            if self._uids.get(key) != pod.uid:
                self._uids[key] = pod.uid
                self._history.pop(key, None)
            if isinstance(result, EngineSample):
                ring = self._history.get(key)
                if ring is None:
                    ring = self._history[key] = collections.deque(maxlen=self.history_length)
                ring.append(result)
            self._say(key, found[key], result)
        self.latest = results
        return results

    def _forget(self, keep: set[PodKey]) -> None:
        for table in (self._history, self._uids, self._said):
            for key in [k for k in table if k not in keep]:
                del table[key]

    def _say(self, key: PodKey, endpoint: Endpoint | EndpointProblem, result: EngineResult) -> None:
        now = self._clock()
        pod = f"{key[0]}/{key[1]}"
        where = endpoint.url if isinstance(endpoint, Endpoint) else "(no endpoint)"
        said = self._said.get(key)
        if isinstance(result, EngineSample) and not result.notes:
            if said is not None:
                log.info("pod %s: engine metrics at %s read again (%s)", pod, where, result.engine)
                del self._said[key]
            return
        if isinstance(result, EngineMissing):
            what = f"{result.reason}: {result.detail}"
            line = "pod %s: engine metrics at %s missing, %s; its engine signals are missing until they read"
        else:
            what = "; ".join(result.notes)
            line = "pod %s: engine metrics at %s (%s) read with signals absent: %s"
        if said is not None and said.what == what and now - said.at < self.say_again_s:
            return
        self._said[key] = _Said(what, now)
        if isinstance(result, EngineMissing):
            log.warning(line, pod, where, what)
        else:
            log.warning(line, pod, where, result.engine, what)

    async def close(self) -> None:
        await self.scraper.close()
