"""The engines modelled by tokens: continuous batching on each Ready replica, one queue in front of them.

Pure and deterministic; the only mutable state of the token model, as ``EngineQueue`` is of the request-rate
one. Requests join one first-in-first-out queue at their arrival (to the microsecond the log gives). The
head is admitted to the Ready replica with the fewest sequences among those with a free sequence slot
(``max_num_seqs``) and room in the KV cache for its prompt + output tokens (reserved whole at admission: no
preemption); while the head fits nowhere, nothing behind it starts (first come, first served, as vLLM's
scheduler). A request larger than the whole KV cache is refused at once (vLLM rejects a prompt longer than
the model's length): abandoned.

An admitted request prefills (``prompt / prefill_tokens_per_second`` seconds, one request at a time on its
replica, in admission order) and its first token is out: its TTFT is its queue wait plus its prefill and any
prefill ahead of it. It then decodes its output tokens with the replica's other running sequences: each step
gives every one a token and takes ``step_seconds(b)`` for a batch of ``b``. A replica's time goes to the
prefills first and to the decode steps between them (prefill and decode share the GPU, neither overlaps).

The seconds are simulated event by event (arrival, end of a prefill, end of a request), each replica's
decoding as one virtual clock (the tokens each running sequence has had), so a second costs a few operations
per request, not one per decode step. A request waiting ``max_wait`` seconds (counted as whole seconds of
arrival, as ``EngineQueue`` does) without being admitted is abandoned. When a replica is deleted its
requests go back to the front of the queue, in arrival order (its clients retry), counted once.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .requests import Request
from .tokens import TokenParams
from .workload import Observation, Pod, Served, Workload, observe

__all__ = ["TokenEngines", "TokenSecond", "TokenTimeline", "token_observation"]

_EPS = 1e-9


@dataclass(frozen=True)
class TokenSecond:
    """What the engines did in one second, and their state at its end."""

    arrived: int
    served: int  # admitted (a sequence slot and KV space): started
    abandoned: int  # waited max_wait in the queue, or refused (larger than the KV cache)
    waiting: int  # in the queue at the end of the second
    waited: float  # seconds the requests admitted this second had waited, summed
    running: int  # admitted and not finished, at the end of the second (prefilling or decoding)
    finished: int
    kv_cache: float  # percent of the KV cache reserved, the mean over the Ready replicas; NaN with none
    utilization: float  # percent of the second the replicas were prefilling or decoding, the mean; NaN
    ttft: float  # mean time to first token of the first tokens this second (else the last second's)
    itl: float  # mean seconds between two tokens of a sequence this second; NaN without a decode step
    output_tokens: float  # tokens decoded this second


@dataclass(frozen=True)
class TokenTimeline:
    """The token model's own series, one entry a second, and its distributions over the run."""

    running: tuple[int, ...]
    finished: tuple[int, ...]
    itl: tuple[float, ...]  # mean seconds between two tokens of a sequence; NaN without decoding
    output_tokens: tuple[float, ...]  # tokens decoded per second
    ttft_ms: tuple[tuple[int, float], ...]  # (TTFT in whole ms, requests), by TTFT
    itl_ms: tuple[tuple[int, float], ...]  # (step time in whole ms, tokens), by step time

    @staticmethod
    def of(seconds: Sequence[TokenSecond], engines: TokenEngines) -> TokenTimeline:
        return TokenTimeline(
            tuple(s.running for s in seconds),
            tuple(s.finished for s in seconds),
            tuple(s.itl for s in seconds),
            tuple(s.output_tokens for s in seconds),
            tuple(sorted((k, float(v)) for k, v in engines.ttfts.items())),
            tuple(sorted(engines.itls.items())),
        )


class _Replica:
    __slots__ = ("busy", "clock", "decoding", "kv", "prefill", "v")

    def __init__(self, clock: float) -> None:
        self.clock = clock
        self.prefill: deque[list[float]] = deque()  # [prompt tokens left, arrival, prompt, output]
        self.decoding: list[
            tuple[float, int, float, int, int]
        ] = []  # heap (last token's v, #, arrival, p, o)
        self.v = 0.0  # tokens each running sequence has had so far (the decode's virtual clock)
        self.kv = 0  # tokens reserved
        self.busy = 0.0  # seconds busy in the current second

    @property
    def seqs(self) -> int:
        return len(self.prefill) + len(self.decoding)


class TokenEngines:
    """The Ready replicas' engines. ``second(t, arrivals, ready)`` simulates ``[t, t + 1)``: ``arrivals`` the
    second's requests in arrival order, ``ready`` the names of the Ready pods that serve it."""

    def __init__(self, params: TokenParams, max_wait: int) -> None:
        self.params = params
        self.max_wait = max_wait
        self.queue: deque[tuple[float, int, int, bool]] = deque()  # (arrival, prompt, output, a retry)
        self.replicas: dict[str, _Replica] = {}
        self.delays: dict[int, float] = {}  # whole seconds waited -> requests (abandoned: max_wait)
        self.ttfts: dict[int, int] = {}  # TTFT in ms -> requests
        self.itls: dict[int, float] = {}  # step time in ms -> tokens
        self.waiting = 0.0
        self._seq = 0
        self._ttft = 0.0
        self._reset()

    def _reset(self) -> None:
        self._served = self._abandoned = self._finished = 0
        self._waited = self._tokens = self._seq_seconds = self._ttft_sum = 0.0
        self._first_tokens = 0

    def second(self, t: int, arrivals: Sequence[Request], ready: Sequence[str]) -> TokenSecond:
        self._reset()
        self._sync(t, ready)
        self._admit(float(t))  # a replica new this second, or one freed at its end, takes the queue's head
        end = float(t + 1)
        i, n = 0, len(arrivals)
        while True:
            arrival = max(float(t), arrivals[i].arrival) if i < n else math.inf
            owner, event = None, math.inf
            for r in self.replicas.values():
                e = self._next_event(r)
                if e < event:
                    owner, event = r, e
            now = min(arrival, event)
            if now >= end:
                break
            if arrival <= event:
                req = arrivals[i]
                self.queue.append((arrival, req.prompt, req.output, False))
                i += 1
            else:
                assert owner is not None
                self._advance(owner, now)
                self._complete(owner, now)
            self._admit(now)
        for j in range(i, n):  # arrivals past the second (not expected): queued at its end
            self.queue.append((end, arrivals[j].prompt, arrivals[j].output, False))
        for r in self.replicas.values():
            self._advance(r, end)
        self._abandon(t)
        return self._result(n)

    def _sync(self, t: int, ready: Sequence[str]) -> None:
        """Replicas to the Ready pods: a new one starts empty; a gone one's requests go back to the queue."""
        back: list[tuple[float, int, int, bool]] = []
        keep = set(ready)
        for name in [name for name in self.replicas if name not in keep]:
            r = self.replicas.pop(name)
            back += [(a, int(p), int(o), True) for _, a, p, o in r.prefill]
            back += [(a, p, o, True) for _, _, a, p, o in r.decoding]
        # retried as the second starts, in their first arrival order: the wait and TTFT count from the retry
        for _, p, o, retry in sorted(back, reverse=True):
            self.queue.appendleft((float(t), p, o, retry))
        for name in ready:
            if name not in self.replicas:
                self.replicas[name] = _Replica(float(t))

    def _next_event(self, r: _Replica) -> float:
        if r.prefill:
            return r.clock + r.prefill[0][0] / self.params.prefill_tokens_per_second
        if r.decoding:
            return r.clock + (r.decoding[0][0] - r.v) * self.params.step_seconds(len(r.decoding))
        return math.inf

    def _advance(self, r: _Replica, x: float) -> None:
        dt = x - r.clock
        if dt <= 0:
            return
        if r.prefill:
            r.prefill[0][0] -= dt * self.params.prefill_tokens_per_second
            r.busy += dt
        elif r.decoding:
            batch = len(r.decoding)
            step = self.params.step_seconds(batch)
            r.v += dt / step
            r.busy += dt
            self._tokens += dt / step * batch
            self._seq_seconds += dt * batch
            ms = int(step * 1000)
            self.itls[ms] = self.itls.get(ms, 0.0) + dt / step * batch
        r.clock = x

    def _complete(self, r: _Replica, now: float) -> None:
        """The event ``r`` was due at ``now``: its prefill ends (the first token), or requests finish."""
        if r.prefill:
            _, arrival, prompt, output = r.prefill.popleft()
            ttft = now - arrival
            self._ttft_sum += ttft
            self._first_tokens += 1
            ms = int(ttft * 1000)
            self.ttfts[ms] = self.ttfts.get(ms, 0) + 1
            if output <= 0:
                self._finish(r, int(prompt))
                return
            self._seq += 1
            heapq.heappush(r.decoding, (r.v + output, self._seq, arrival, int(prompt), int(output)))
            return
        r.v = max(r.v, r.decoding[0][0])
        while r.decoding and r.decoding[0][0] <= r.v + _EPS:
            _, _, _, prompt, output = heapq.heappop(r.decoding)
            self._finish(r, prompt + output)

    def _finish(self, r: _Replica, tokens: int) -> None:
        r.kv -= tokens
        self._finished += 1

    def _admit(self, now: float) -> None:
        p = self.params
        while self.queue:
            arrival, prompt, output, retry = self.queue[0]
            need = prompt + output
            if need > p.kv_cache_tokens:
                self.queue.popleft()
                self._abandoned += 1
                if not retry:
                    self.delays[0] = self.delays.get(0, 0.0) + 1
                continue
            best: _Replica | None = None
            for r in self.replicas.values():
                if r.seqs < p.max_num_seqs and r.kv + need <= p.kv_cache_tokens:
                    if best is None or r.seqs < best.seqs:
                        best = r
            if best is None:
                return
            self.queue.popleft()
            self._advance(best, now)
            best.prefill.append([float(prompt), arrival, float(prompt), float(output)])
            best.kv += need
            if not retry:
                wait = now - arrival
                self._served += 1
                self._waited += wait
                self.delays[int(wait)] = self.delays.get(int(wait), 0.0) + 1

    def _abandon(self, t: int) -> None:
        while self.queue and int(self.queue[0][0]) <= t - self.max_wait:
            retry = self.queue.popleft()[3]
            self._abandoned += 1
            if not retry:
                self.delays[self.max_wait] = self.delays.get(self.max_wait, 0.0) + 1

    def _result(self, arrived: int) -> TokenSecond:
        reps = list(self.replicas.values())
        kv = sum(100 * r.kv / self.params.kv_cache_tokens for r in reps) / len(reps) if reps else math.nan
        util = sum(100 * min(1.0, r.busy) for r in reps) / len(reps) if reps else math.nan
        for r in reps:
            r.busy = 0.0
        if self._first_tokens:
            self._ttft = self._ttft_sum / self._first_tokens
        self.waiting = float(len(self.queue))
        return TokenSecond(
            arrived=arrived,
            served=self._served,
            abandoned=self._abandoned,
            waiting=len(self.queue),
            waited=self._waited,
            running=sum(r.seqs for r in reps),
            finished=self._finished,
            kv_cache=kv,
            utilization=util,
            ttft=self._ttft,
            itl=self._seq_seconds / self._tokens if self._tokens > 0 else math.nan,
            output_tokens=self._tokens,
        )


def token_observation(
    pods: tuple[Pod, ...], demand: float, workload: Workload, now: int, sec: TokenSecond
) -> tuple[Served, Observation]:
    """The queue's step and the observation of second ``now`` from what the token model did in it: the
    engines' waiting, running, KV-cache fill, TTFT and GPU utilization are the model's."""
    step = Served(float(sec.served), float(sec.abandoned), float(sec.waiting), sec.waited)
    obs = observe(pods, demand, workload, now, step)
    if not obs.ready:
        return step, obs
    return step, replace(
        obs, util=sec.utilization, running=float(sec.running), kv_cache=sec.kv_cache, ttft=sec.ttft
    )
