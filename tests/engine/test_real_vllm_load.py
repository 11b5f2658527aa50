"""Under a load the test drives, what the real agent reads of the real vLLM agrees with what the load
generator knows: the requests sent, finished, waiting and running at each instant a reading was taken,
within one scrape's lag."""

from __future__ import annotations

import asyncio
import time

import pytest

from gpuscale.vllmcpu import VllmServer
from tests.engine.conftest import MAX_NUM_SEQS
from tests.engine.load import Load, Stalls, client_session
from tests.engine.pods import Readings, add_vllm_pod, vllm_apart  # noqa: F401  (a fixture)
from tests.scaler.conftest import Cluster

# the server on its worker's CPU, this process on the other (``tests.engine.pods.apart``: why)
pytestmark = pytest.mark.usefixtures("vllm_apart")

INTERVAL = 0.5  # the agent's sampling interval: a scrape that takes longer than 0.4 s leaves no reading
# One scrape's lag: a reading is stamped when its scrape starts and the engine answers within the scrape's
# timeout (0.4 s); the generator stamps a request when it hands it to the event loop it shares with the agent.
LAG = INTERVAL
BURSTS = 5
BURST = 20  # 4 run at once: the rest of each burst waits
PERIOD = 2.7  # out of step with the readings, so that they catch each burst at another point of its life
BACKGROUND = 2.0  # requests/s between the bursts
TOKENS = 120  # prompt and answer fit in one KV block (the CPU build's blocks hold 128 tokens): no preemption


async def test_the_agents_readings_agree_with_the_load_generator_within_a_scrapes_lag(
    cluster: Cluster, real_vllm: VllmServer
) -> None:
    """Five bursts of 20 requests 2.7 s apart over a background of 2 requests/s, 120 tokens each. Every
    reading the agent took is held to the generator's records within one scrape's lag (``LAG``, 0.5 s) of
    its instant ``t``: the requests the engine has received (finished since the load began, plus waiting
    and running) lie between those sent by ``t - LAG`` and by ``t + LAG``; the finished counter between
    the requests answered by then; waiting + running between the fewest and the most in flight over
    ``[t - LAG, t + LAG]``; never more than 4 running. (A reading taken while the test's process stood
    still, not run by a busy machine, is not held to a lag it could not keep; at least 12 are held.) The load
    makes the engine queue (some reading shows requests waiting, and the batch full), and once it drains
    the counters hold exactly what was sent: every request finished once, its tokens, its first token and
    its queue time counted."""
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=INTERVAL)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    readings = Readings(node, "llm-0")
    stalls = Stalls()
    try:
        t0, base = await readings.idle()
        assert base.requests_finished is not None and base.generation_tokens is not None
        assert base.queue_time_count is not None and base.ttft is not None
        async with client_session() as session:
            load = Load(real_vllm.url, session)
            background = asyncio.create_task(load.at_rate(BACKGROUND, BURSTS * PERIOD, TOKENS, stream=False))
            for _ in range(BURSTS):
                for _ in range(BURST):
                    load.send(TOKENS, stream=False)
                await asyncio.sleep(PERIOD)
            await background
            await load.drain()
        assert not load.errors, load.errors
        assert all(r.finish_reason == "length" for r in load.requests)
        await readings.after(time.time() + LAG, what="a reading after the last request ended")
    finally:
        await stalls.close()
        await readings.close()

    series = readings.series(t0 + 1e-9)
    checked: list[tuple[float, str, str, str]] = []
    for t, m in series:
        assert m.requests_finished is not None and m.waiting is not None and m.running is not None
        assert m.running <= MAX_NUM_SEQS, m
        if stalls.during(t - LAG, t + LAG):
            continue
        finished = m.requests_finished - base.requests_finished
        received = finished + m.waiting + m.running
        fewest, most = load.in_flight_between(t - LAG, t + LAG)
        checked.append(
            (
                round(t - t0, 2),
                f"received {received:g} of sent {load.sent_by(t - LAG)}..{load.sent_by(t + LAG)}",
                f"finished {finished:g} of {load.finished_by(t - LAG)}..{load.finished_by(t + LAG)}",
                f"waiting {m.waiting:g} + running {m.running:g} of in flight {fewest}..{most}",
            )
        )
        assert load.sent_by(t - LAG) <= received <= load.sent_by(t + LAG), checked
        assert load.finished_by(t - LAG) <= finished <= load.finished_by(t + LAG), checked
        assert fewest <= m.waiting + m.running <= most, checked
    assert len(checked) >= 12, (checked, stalls.intervals)
    # the load did what it is for: requests waited behind a full batch
    assert any(m.waiting for _, m in series), series
    assert any(m.running == MAX_NUM_SEQS for _, m in series), series
    # drained: every request finished once, its tokens, first token and queue time counted
    n = len(load.requests)
    last = series[-1][1]
    assert last.waiting == 0 and last.running == 0, last
    assert last.requests_finished == base.requests_finished + n
    assert last.generation_tokens == base.generation_tokens + n * TOKENS
    assert last.queue_time_count == base.queue_time_count + n
    assert last.ttft is not None and last.ttft.total == base.ttft.total + n
