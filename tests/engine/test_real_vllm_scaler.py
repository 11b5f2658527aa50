"""The real scaler answers on the real vLLM as KEDA asks (GetMetrics over gRPC): ``request_rate``,
``queue_length``, ``kv_cache_usage`` and ``ttft_p95``, each held to what the load generator knows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from gpuscale.model import BucketCounts
from gpuscale.scaler.wire import ScaledObjectKey
from gpuscale.scaling.engine import quantile
from gpuscale.vllmcpu import VllmServer
from tests.engine.conftest import MAX_NUM_SEQS
from tests.engine.load import Load, Stalls, client_session
from tests.engine.pods import Readings, add_vllm_pod, answer, vllm_apart  # noqa: F401  (a fixture)
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient

# the server on its worker's CPU, this process on the other (``tests.engine.pods.apart``: why)
pytestmark = pytest.mark.usefixtures("vllm_apart")

INTERVAL = 0.5  # the agent's sampling interval
LAG = INTERVAL  # one scrape's lag (tests/engine/test_vllm_apart_load.py holds the readings to it)


def _metadata(metric: str, window: float, stale_after: float, target: str = "4") -> dict[str, str]:
    return {
        "podSelector": "app=llm",
        "metric": metric,
        "targetValue": target,
        "window": f"{window:g}",
        "staleAfter": f"{stale_after:g}",
    }


async def test_request_rate_is_the_rate_the_generator_sends(
    cluster: Cluster, keda: Callable[[int], KedaClient], real_vllm: VllmServer
) -> None:
    """4 requests/s, evenly spaced, that the engine serves as they come. Once the load fills the 8 s
    window, every ``request_rate`` the scaler answers is the generator's sending rate, its plain value (no
    decision moved it). The bound: each reading counts the requests sent up to one scrape's lag either
    side of it (the load tier's finding), so over ``s`` seconds between the window's first and last
    readings the count is off by at most ``2 x rate x LAG + 1`` requests (the generator is never more than
    one request off its schedule), the rate by that over ``s``; ``s`` is at least the window less three
    intervals (6.5 s: a scrape missed at the window's start, the newest reading one interval on its way to
    the scaler): 4 +- 0.77 requests/s. Judged: answers whose window saw the test's process never stand still
    (a process not run when ready keeps no lag); the load goes on until 6 are judged (40 s at most)."""
    rate, window = 4.0, 8.0
    md = _metadata("request_rate", window, 10.0)
    tolerance = (2 * rate * LAG + 1) / (window - 3 * INTERVAL)
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=INTERVAL)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    readings = Readings(node, "llm-0")
    await readings.idle()
    scaler = await cluster.scaler(kube=False)
    assert scaler.service is not None
    client = keda(scaler.grpc_port)
    stalls = Stalls()
    answers: list[tuple[float, float | str, str, bool]] = []
    try:
        async with client_session() as session:
            load = Load(real_vllm.url, session)
            start = time.time()
            sending = asyncio.create_task(load.at_rate(rate, 40.0, 64, stream=False))
            await asyncio.sleep(window + 1.0)
            while sum(judged for *_, judged in answers) < 6 and not sending.done():
                v = await answer(client, md)
                now = time.time()
                explained = await scaler.service.explain(ScaledObjectKey("so", "default", md))
                decided = cast(dict[str, Any], explained.get("answer", {})).get("decided", "")
                judged = isinstance(v, float) and not stalls.during(now - window - LAG, now)
                answers.append(
                    (round(now - start, 2), v if isinstance(v, float) else v.name, decided, judged)
                )
                await asyncio.sleep(0.5)
            sending.cancel()
            await load.drain()
        assert not load.errors, load.errors
    finally:
        await stalls.close()
        await readings.close()
    judged_answers = [(got, d) for _, got, d, judged in answers if judged]
    assert len(judged_answers) >= 6, (answers, stalls.intervals)
    for got, decided in judged_answers:
        assert isinstance(got, float) and abs(got - rate) <= tolerance, (answers, tolerance)
        assert decided == "", answers


async def test_queue_length_and_kv_cache_usage_follow_a_burst(
    cluster: Cluster, keda: Callable[[int], KedaClient], real_vllm: VllmServer
) -> None:
    """A burst of 40 requests on an engine that runs 4 at once: 36 wait at first, and the queue drains as
    the batch turns over. Asked every 0.2 s over the newest reading (window 0), ``queue_length`` is more
    than 0 at some call while the generator had more requests in flight than the batch holds throughout
    the 1.5 s before it (the newest reading the scaler holds is at most two intervals old, plus one
    scrape's lag), never more than the 36 that can wait, and 0 once every request has ended;
    ``kv_cache_usage`` is more than 0 at some of those calls, never more than 100, and 0 once the engine
    is idle (the tiny model's requests free their blocks). (A reading between two steps can show the batch
    empty with requests still waiting, and the cache with it: not every call under load reads above 0.)"""
    burst, held = 40, 2 * INTERVAL + LAG
    queue_md = _metadata("queue_length", 0.0, 2.0)
    kv_md = _metadata("kv_cache_usage", 0.0, 2.0, target="80")
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=INTERVAL)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    readings = Readings(node, "llm-0")
    await readings.idle()
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    seen: list[tuple[float, int, float | str, float | str]] = []
    try:
        async with client_session() as session:
            load = Load(real_vllm.url, session)
            for _ in range(burst):
                load.send(120, stream=False)
            while load.tasks:
                q, kv = await answer(client, queue_md), await answer(client, kv_md)
                t = time.time()
                seen.append(
                    (
                        round(t - load.requests[0].sent, 2),
                        load.in_flight_between(t - held, t)[0],
                        q if isinstance(q, float) else q.name,
                        kv if isinstance(kv, float) else kv.name,
                    )
                )
                await asyncio.sleep(0.2)
            await load.drain()
        assert not load.errors, load.errors
        await readings.after(time.time() + LAG)
        await readings.after(time.time())  # and the scaler has it: it came a reading ago
        q_after, kv_after = await answer(client, queue_md), await answer(client, kv_md)
    finally:
        await readings.close()
    queued = [(q, kv) for _, n, q, kv in seen if isinstance(q, float) and n > MAX_NUM_SEQS]
    assert any(q > 0 for q, _ in queued), seen
    assert all(0 <= q <= burst - MAX_NUM_SEQS for _, _, q, _ in seen if isinstance(q, float)), seen
    assert any(isinstance(kv, float) and kv > 0 for _, kv in queued), seen
    assert all(0 <= kv <= 100 for *_, kv in seen if isinstance(kv, float)), seen
    assert q_after == 0.0 and kv_after == 0.0, (q_after, kv_after, seen)


async def test_ttft_p95_is_the_generators_first_token_times(
    cluster: Cluster, keda: Callable[[int], KedaClient], real_vllm: VllmServer
) -> None:
    """20 streamed requests of 120 tokens at once: the first 4 get their first token at once, the others
    as the batch turns over, about half a second a turn (five turns: first tokens from 0 to 2 s). Over a
    window holding the whole burst, ``ttft_p95`` is the 95th percentile of the generator's own
    first-token times as Prometheus' ``histogram_quantile`` reads them in vLLM's buckets: between that of
    the times less ``slack`` and that of the times themselves. vLLM measures from when its server took the
    request to when it produced the first token, the generator from when it sent it to when the token
    arrived, so the engine's times are the generator's less a little (``slack``: one scrape's lag, the
    event loop the generator shares with the agent and scaler being busy, plus any time the machine stood
    still). Before the burst, with no request in the window, the answer is 0: nothing waited."""
    burst = 20
    md = _metadata("ttft_p95", 20.0, 20.0, target="1")
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=INTERVAL)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    readings = Readings(node, "llm-0")
    stalls = Stalls()
    try:
        t0, _ = await readings.idle()
        await readings.after(t0)  # two idle readings: an empty window, not a missing one
        scaler = await cluster.scaler(kube=False)
        client = keda(scaler.grpc_port)

        async def answered() -> bool:  # the scaler waits for the agent's complete state (ready grace)
            return isinstance(await answer(client, md), float)

        await until(answered, what="the scaler's first answer")
        before = await answer(client, md)
        async with client_session() as session:
            load = Load(real_vllm.url, session)
            start = time.time()
            for _ in range(burst):
                load.send(120)
            await load.drain()
        assert not load.errors, load.errors
        slack = LAG + stalls.total(start, time.time())
        t, m = await readings.after(time.time())
        await readings.after(t)  # the reading after the burst reached the scaler too
        got = await answer(client, md)
    finally:
        await stalls.close()
        await readings.close()
    assert m.ttft is not None
    bounds = m.ttft.bounds
    times = [r.first - r.sent for r in load.requests if r.first is not None]
    assert len(times) == burst

    def p95(values: list[float]) -> float | None:
        counts = tuple(float(sum(1 for v in values if v <= b)) for b in bounds)
        return quantile(0.95, BucketCounts(bounds, counts))

    low, high = p95([max(0.0, v - slack) for v in times]), p95(times)
    assert before == 0.0
    assert isinstance(got, float) and low is not None and high is not None
    assert low <= got <= high, (got, low, high, slack, sorted(times))
