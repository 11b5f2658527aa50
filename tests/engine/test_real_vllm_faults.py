"""The real vLLM when things go wrong: clients that give up, a client that hangs up mid-answer, an engine
process that dies and comes back. What the real server does, and that gpuscale's answers stay honest
through it."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gpuscale.model import ModelSignals
from gpuscale.vllmcpu import VllmServer
from tests.engine.load import Load, Stalls, client_session
from tests.engine.pods import (  # noqa: F401  (vllm_apart: a fixture)
    Readings,
    add_vllm_pod,
    answer,
    apart,
    relaunch,
    vllm_apart,
)
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient

# the server on its worker's CPU, this process on the other (``tests.engine.pods.apart``: why)
apart_from_the_engine = pytest.mark.usefixtures("vllm_apart")

INTERVAL = 0.5
LAG = INTERVAL


def _rate_metadata(window: float, stale_after: float) -> dict[str, str]:
    return {
        "podSelector": "app=llm",
        "metric": "request_rate",
        "targetValue": "4",
        "window": f"{window:g}",
        "staleAfter": f"{stale_after:g}",
    }


def _counted(series: list[tuple[float, ModelSignals]]) -> float | None:
    """What the counters alone say arrives per second over the readings: finished plus the growth of
    waiting and running, first to last (``None`` with fewer than two)."""
    if len(series) < 2:
        return None
    (t0, a), (t1, b) = series[0], series[-1]
    assert a.requests_finished is not None and b.requests_finished is not None
    assert a.waiting is not None and a.running is not None and b.waiting is not None and b.running is not None
    finished = b.requests_finished - a.requests_finished
    grown = b.waiting + b.running - a.waiting - a.running
    return (finished + grown) / (t1 - t0)


@dataclass(frozen=True)
class _Shed:
    """One answer of the shedding test, and what the generator and the counters said over its window."""

    at: float
    answer: float | str
    sent: float  # per second, the generator's
    abandoned: float  # per second, the generator's clients that gave up
    counted: float | None  # per second, the counters alone
    stalled: float  # seconds the machine stood still over the window and the ``T`` before it
    steady: bool  # judged: the machine hardly stood still, the agent read on schedule, the rate was kept


@apart_from_the_engine
async def test_a_queue_shedding_at_its_clients_timeout_reads_the_arrivals_not_what_is_served(
    cluster: Cluster, keda: Callable[[int], KedaClient], real_vllm: VllmServer
) -> None:
    """24 requests/s of 120 tokens, streamed, each client giving up if its first token has not come 8 s
    after it sent (``T``, a gateway's time-to-first-byte limit): the engine serves 2 to 15 a second here
    (2 shared cores), so its queue grows until the clients' patience sheds it (100 to 190 wait; a third
    or more of the requests are abandoned, all while waiting). vLLM 0.32.0 counts no abandoned request, so
    the counters alone (finished plus the growth of waiting and running) read what is served: they miss at
    least half of what the generator's clients abandoned (measured: they read 13 to 15 a second of 24). The
    scaler's ``request_rate`` switches to Little's law over the window (the mean number waiting over the
    mean wait of the requests that left the queue) and reads the arrivals: between 0.85 and 1.35 times
    what the generator sent over the window, at every answer judged (measured: 1.00 to 1.03).

    Why that band: a request leaves the queue either for the batch (then it is served to its end, and vLLM
    observes its wait) or by its client giving up at ``T``; in the steady state each slot of the batch
    that frees takes the oldest request still waiting, whose client has waited nearly ``T``, and it stays
    only if its first token comes within ``T``: so the requests whose wait vLLM observes waited between
    ``T - S`` and ``T`` (``S``: from leaving the queue to the first token reaching the client, a step, 2 s
    at most when the engine crawls), the abandoned ones ``T``, and the estimate is within 1 and
    ``T / (T - S)`` = 1.33 times the arrivals. Below 1: the mean of about 10 readings of a gauge that moves
    by a few requests, and the window's edges (requests waiting across them): 0.85.

    Judged: an answer whose window and the ``T`` before it (the queue's memory) saw the test's process
    stand still for at most a tenth of the time (a process not run when ready fires its clients' timeouts
    at once: not a steady queue), the agent reading on schedule and the generator sending at its rate;
    the load goes on until 4 answers are judged (75 s at most)."""
    rate, patience, window = 24.0, 8.0, 10.0
    interval = 1.0  # a scrape of an engine holding 100 requests on a busy core may take more than 0.4 s
    md = _rate_metadata(window, 12.0)
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=interval)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    readings = Readings(node, "llm-0")
    await readings.idle()
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    stalls = Stalls()
    answers: list[_Shed] = []
    try:
        async with client_session() as session:
            load = Load(real_vllm.url, session)
            start = time.time()
            sending = asyncio.create_task(load.at_rate(rate, 75.0, 120, first_token_timeout=patience))
            await asyncio.sleep(patience + window)
            while sum(a.steady for a in answers) < 4 and time.time() - start < 75.0:
                v = await answer(client, md)
                now = time.time()
                series = readings.series(now - window)
                times = [now - window] + [t for t, _ in series] + [now]
                sent = load.sent_between(now - window, now) / window
                counted = _counted(series)
                answers.append(
                    _Shed(
                        at=round(now - start, 2),
                        answer=v if isinstance(v, float) else v.name,
                        sent=sent,
                        abandoned=sum(
                            1
                            for r in load.requests
                            if r.abandoned and r.done and now - window < r.done <= now
                        )
                        / window,
                        counted=counted,
                        stalled=stalls.total(now - window - patience, now),
                        steady=isinstance(v, float)
                        and counted is not None
                        and stalls.total(now - window - patience, now) <= 0.1 * (window + patience)
                        and max(b - a for a, b in itertools.pairwise(times)) <= 2.5 * interval
                        and abs(sent - rate) <= 0.1 * rate,
                    )
                )
                await asyncio.sleep(0.5)
            sending.cancel()
            await load.cancel()
        assert not load.errors, load.errors
    finally:
        await stalls.close()
        await readings.close()
    judged = [a for a in answers if a.steady]
    assert len(judged) >= 4, ("too few answers over a steady queue", stalls.intervals, answers)
    for a in judged:
        assert isinstance(a.answer, float) and a.counted is not None
        assert a.abandoned >= 0.2 * a.sent, answers  # the queue sheds
        assert a.counted <= a.sent - 0.5 * a.abandoned, answers  # the counters alone miss the abandoned
        assert 0.85 * a.sent <= a.answer <= 1.35 * a.sent, answers  # the scaler: what arrives


@apart_from_the_engine
async def test_a_client_that_hangs_up_stops_its_generation_and_counts_nowhere(
    cluster: Cluster, keda: Callable[[int], KedaClient], real_vllm: VllmServer
) -> None:
    """Four requests for 480 tokens each, not streamed (seconds of work on this engine: more than its KV
    cache holds at once), hang up once the scaler answers them in flight. On vLLM 0.32.0 the engine stops
    generating for them within a scrape's lag: the first reading after shows nothing running or waiting,
    and the generation counter stands still from then on, short of the 1,920 tokens asked. It counts their
    first tokens (TTFT +4) and nothing else: ``vllm:request_success_total`` moves in no series, ``abort``
    included (gpuscale reads ``requests_aborted`` as 0, present, not absent), and no queue time is
    observed. gpuscale's answers stay honest through it: the scaler's ``requests_in_flight`` goes from 4
    to 0 (nothing left counted), ``request_rate`` over a window that holds the drop is never negative (in
    flight falls by 4 with none finished: a counted rate below 0, clamped), and no reading carries a
    note."""
    tokens, n = 480, 4
    flight_md = {**_rate_metadata(0.0, 2.0), "metric": "requests_in_flight"}
    rate_md = _rate_metadata(2.0, 4.0)
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=INTERVAL)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    readings = Readings(node, "llm-0")
    t0, base = await readings.idle()
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    calls: list[tuple[float, float | str, float | str]] = []

    async def ask() -> None:
        while True:
            f, r = await answer(client, flight_md), await answer(client, rate_md)
            calls.append(
                (time.time(), f if isinstance(f, float) else f.name, r if isinstance(r, float) else r.name)
            )
            await asyncio.sleep(0.2)

    asking = asyncio.create_task(ask())
    try:
        async with client_session() as session:
            load = Load(real_vllm.url, session)
            sent = [load.send(tokens, stream=False) for _ in range(n)]
            await until(
                lambda: any(f == n for _, f, _ in calls) or any(r.done is not None for r in sent),
                30,
                "the scaler's answer: 4 in flight",
            )
            assert all(r.done is None for r in sent), ("a request ended before its client hung up", calls)
            await load.cancel()
            hung_up = time.time()
            t1, stopped = await readings.after(hung_up + LAG)
            t2, later = await readings.after(t1)
            _, last = await readings.after(t2)
            await asyncio.sleep(2.0)  # the rate's window past the drop
    finally:
        asking.cancel()
        await readings.close()
    assert all(r.abandoned and r.finish_reason is None for r in sent), sent
    # the engine stopped: nothing runs or waits, the generation counter stands still, short of what was asked
    assert stopped.running == 0 and stopped.waiting == 0, stopped
    assert stopped.generation_tokens == later.generation_tokens == last.generation_tokens
    assert base.generation_tokens is not None and last.generation_tokens is not None
    generated = last.generation_tokens - base.generation_tokens
    assert 0 < generated < n * tokens, generated
    # vLLM 0.32.0 counts the requests' first tokens and nothing else of them
    assert base.ttft is not None and last.ttft is not None and last.ttft.total == base.ttft.total + n
    assert last.requests_finished == base.requests_finished
    assert last.requests_aborted == base.requests_aborted == 0.0
    assert last.queue_time_count == base.queue_time_count
    assert not any(s.notes for t, s in readings.samples.items() if t > t0)
    # gpuscale's answers: 4 in flight, then none left; the request rate never negative, across the drop
    flights = [f for t, f, _ in calls if isinstance(f, float) and t > hung_up + 2 * INTERVAL + LAG]
    assert flights and all(f == 0.0 for f in flights), calls
    rates = [r for t, _, r in calls if isinstance(r, float) and t > hung_up]
    assert rates and all(r >= 0.0 for r in rates), calls


async def test_an_engine_restart_makes_no_answer_a_made_up_low(
    cluster: Cluster, keda: Callable[[int], KedaClient], real_vllm: VllmServer
) -> None:
    """4 requests/s throughout; the engine's process is killed (SIGKILL, as an OOM kill) and started again on
    its port, its counters starting over. The trigger's window (60 s) spans the restart, so every answer
    after it is taken over readings of both processes: counters that fall back to 0 (the old process had
    counted hundreds), in flight that starts over. While the engine is down, its pod is missing: every
    answer is ``UNAVAILABLE`` (or, before the first failed scrape reached the scaler, the rate of the old
    process' readings as answered before the kill), never a low number. After it, nothing is made up from
    the reset: no answer is negative, and each is the generator's 4 requests/s within what the readings
    since the restart can tell, ``(2 x rate x LAG + 1) / s`` over the ``s`` seconds they span (the load
    tier's bound, as for ``request_rate``), judged once they span 2 s (and neither end of the span saw the
    test's process stand still): the old process' counts, were they mixed in, would read 0 (clamped) or
    far off."""
    rate, window = 4.0, 60.0
    md = _rate_metadata(window, window)
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=INTERVAL)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    readings = Readings(node, "llm-0")
    await readings.idle()
    scaler = await cluster.scaler(kube=False, history_s=120.0)
    client = keda(scaler.grpc_port)
    stalls = Stalls()
    answers: list[tuple[float, float | str]] = []

    async def ask() -> None:
        while True:
            v = await answer(client, md)
            answers.append((time.time(), v if isinstance(v, float) else v.name))
            await asyncio.sleep(0.25)

    asking = asyncio.create_task(ask())
    try:
        async with client_session() as session:
            load = Load(real_vllm.url, session)
            with apart(real_vllm):
                sending = asyncio.create_task(load.at_rate(rate, 600.0, 64, timeout=10.0, stream=False))
                await asyncio.sleep(8.0)
            before = answers[-1][1]
            killed = time.time()
            await asyncio.to_thread(real_vllm.kill)  # on every CPU again: a killed process exits there
            await asyncio.to_thread(relaunch, real_vllm)
            up = time.time()
            with apart(real_vllm):  # the new process
                first, _ = await readings.after(up, what="the first reading of the new process")
                await asyncio.sleep(8.0)
                sending.cancel()
                await load.drain()
    finally:
        asking.cancel()
        await stalls.close()
        await readings.close()
    old = [m for t, m in readings.series() if t < killed]
    new = [m for t, m in readings.series() if t >= first]
    assert old[-1].requests_finished is not None and new[0].requests_finished is not None
    assert new[0].requests_finished < old[-1].requests_finished, "the counters started over"
    # while down: the old process' rate as answered before the kill (its readings' window less a reading or
    # two: 8 s of load, readings spanning 6 s at least), else UNAVAILABLE
    held = (2 * rate * LAG + 1) / 6.0
    assert isinstance(before, float) and before >= rate / 2, answers
    down = [v for t, v in answers if killed < t < up]
    assert "UNAVAILABLE" in down, answers
    assert all(v == "UNAVAILABLE" or (isinstance(v, float) and abs(v - before) <= held) for v in down), (
        answers
    )
    after = [(t, v) for t, v in answers if t > up]
    assert all(v == "UNAVAILABLE" or (isinstance(v, float) and v >= 0) for _, v in after), answers
    judged = 0
    for t, v in after:
        span = t - first - 2 * INTERVAL  # the newest reading the scaler holds is up to two intervals old
        steady = not stalls.during(first - LAG, first + LAG) and not stalls.during(t - 2 * INTERVAL - LAG, t)
        if isinstance(v, float) and span >= 2.0 and steady:
            judged += 1
            assert abs(v - rate) <= (2 * rate * LAG + 1) / span, (round(t - first, 2), v, answers)
    assert judged >= 8, (answers, stalls.intervals)
