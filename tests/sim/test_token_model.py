"""The token model against cases worked by hand: one request alone, a saturated batch, a KV-full queue."""

from __future__ import annotations

import math

import pytest

from gpuscale.sim.batching import TokenEngines
from gpuscale.sim.requests import Request
from gpuscale.sim.tokens import PRESETS, TokenParams, capacity_per_replica, saturated_batch

PARAMS = TokenParams(
    prefill_tokens_per_second=1000.0,
    decode_step_seconds=0.01,
    decode_step_seconds_per_sequence=0.001,
    max_num_seqs=4,
    kv_cache_tokens=100_000,
)
FAST_PREFILL = TokenParams(1e12, 0.01, 0.001, 4, 100_000)


def test_the_step_time_grows_with_the_batch() -> None:
    assert PARAMS.step_seconds(1) == 0.01
    assert PARAMS.step_seconds(4) == pytest.approx(0.013)


def test_one_request_alone_prefills_then_decodes_at_the_batch_of_one_step() -> None:
    """TTFT = prompt / prefill rate (200 / 1000 = 0.2 s); decode = output x step(1) = 100 x 0.01 = 1 s, so
    it finishes at 1.2 s: 80 tokens in second 0 and 20 in second 1."""
    engines = TokenEngines(PARAMS, max_wait=60)
    first = engines.second(0, [Request(0.0, 200, 100)], ["a"])
    assert first.ttft == pytest.approx(0.2)
    assert first.served == 1 and first.finished == 0 and first.running == 1
    assert first.output_tokens == pytest.approx(80)
    assert first.itl == pytest.approx(0.01)
    assert first.utilization == pytest.approx(100)
    assert first.kv_cache == pytest.approx(100 * 300 / 100_000)
    second = engines.second(1, [], ["a"])
    assert second.finished == 1 and second.running == 0
    assert second.output_tokens == pytest.approx(20)
    assert second.utilization == pytest.approx(20)
    assert second.kv_cache == 0
    assert engines.ttfts == {200: 1}


def test_a_request_arriving_mid_second_waits_from_its_arrival() -> None:
    engines = TokenEngines(PARAMS, max_wait=60)
    sec = engines.second(3, [Request(3.5, 100, 10)], ["a"])
    assert sec.ttft == pytest.approx(0.1)
    assert sec.finished == 1
    assert sec.utilization == pytest.approx(100 * (0.1 + 10 * 0.01))


def test_a_saturated_batch_runs_max_num_seqs_at_the_step_formula_s_rate() -> None:
    """Six long requests, four slots: four run, two wait; each running sequence gets 1 / step(4) =
    1 / 0.013 tokens/s, the replica 4 / 0.013 = 307.7 tokens/s."""
    engines = TokenEngines(FAST_PREFILL, max_wait=60)
    sec = engines.second(0, [Request(0.0, 10, 1000)] * 6, ["a"])
    assert sec.running == 4 and sec.waiting == 2 and sec.served == 4
    assert sec.itl == pytest.approx(0.013)
    assert sec.output_tokens == pytest.approx(4 / 0.013, rel=1e-6)
    assert engines.second(1, [], ["a"]).output_tokens == pytest.approx(4 / 0.013, rel=1e-6)


def test_two_replicas_share_the_queue() -> None:
    engines = TokenEngines(FAST_PREFILL, max_wait=60)
    sec = engines.second(0, [Request(0.0, 10, 1000)] * 6, ["a", "b"])
    assert sec.running == 6 and sec.waiting == 0
    # batches of 3 and 3: 2 x 3 / step(3)
    assert sec.output_tokens == pytest.approx(6 / 0.012, rel=1e-6)


def test_a_kv_full_replica_queues_requests_though_slots_are_free() -> None:
    """KV 1,000 tokens, requests of 300 + 300: the second does not fit beside the first (600 + 600 > 1,000)
    and waits with three slots free, until the first finishes at 0.3 + 300 x 0.01 = 3.3 s."""
    params = TokenParams(1000.0, 0.01, 0.001, 4, 1000)
    engines = TokenEngines(params, max_wait=60)
    sec = engines.second(0, [Request(0.0, 300, 300), Request(0.0, 300, 300)], ["a"])
    assert sec.running == 1 and sec.waiting == 1
    assert sec.kv_cache == pytest.approx(60)
    for t in (1, 2):
        assert engines.second(t, [], ["a"]).waiting == 1
    sec = engines.second(3, [], ["a"])
    assert sec.finished == 1 and sec.served == 1 and sec.waiting == 0
    assert sec.waited == pytest.approx(3.3)
    assert engines.delays == {0: 1, 3: 1}


def test_a_request_larger_than_the_kv_cache_is_refused() -> None:
    params = TokenParams(1000.0, 0.01, 0.001, 4, 1000)
    sec = TokenEngines(params, max_wait=60).second(0, [Request(0.0, 900, 200)], ["a"])
    assert sec.abandoned == 1 and sec.served == 0 and sec.waiting == 0


def test_a_request_waiting_max_wait_is_abandoned() -> None:
    engines = TokenEngines(PARAMS, max_wait=2)
    assert engines.second(0, [Request(0.0, 10, 10)], []).waiting == 1
    assert engines.second(1, [], []).abandoned == 0
    sec = engines.second(2, [], [])
    assert sec.abandoned == 1 and sec.waiting == 0
    assert engines.delays == {2: 1}


def test_a_deleted_replica_s_requests_go_back_to_the_queue_once() -> None:
    engines = TokenEngines(FAST_PREFILL, max_wait=60)
    engines.second(0, [Request(0.0, 10, 1000)] * 2, ["a"])
    sec = engines.second(1, [], ["b"])
    assert sec.running == 2 and sec.served == 0  # retried, not counted again
    assert engines.delays == {0: 2}
    assert math.isnan(engines.second(2, [], []).kv_cache)


def test_the_capacity_per_replica_is_a_saturated_replica_s_rate_for_the_mean_request() -> None:
    # batch min(4, 100000 // 1100) = 4: 1000 / 1000 + 100 x 0.013 / 4 = 1.325 s a request
    assert saturated_batch(PARAMS, 1100) == 4
    assert capacity_per_replica(PARAMS, 1000, 100) == pytest.approx(1 / 1.325)
    assert saturated_batch(TokenParams(1.0, 0.01, 0.0, 256, 1000), 300) == 3


def test_the_preset_is_the_benchmark_s_figures() -> None:
    """docs/simulator.md: NIM 1.8.0, Llama-3.3-70B fp8 on 2 x H100, 5000 in / 500 out: ITL 18.58 ms at
    concurrency 1 and 38.75 ms at 25, TTFT 406.77 ms."""
    p = PRESETS["llama-3.3-70b-fp8-2xh100"]
    assert p.step_seconds(1) == pytest.approx(0.01858)
    assert p.step_seconds(25) == pytest.approx(0.03875, abs=2e-4)
    assert 5000 / p.prefill_tokens_per_second == pytest.approx(0.40677, abs=1e-4)
    assert p.step_seconds(85) == pytest.approx(0.0929, abs=4e-3)  # the plateau's ITL, 92.9 ms
