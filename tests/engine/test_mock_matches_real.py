"""The mock vLLM (``gpuscale.backends.mock_engine``) held to the real one (vLLM 0.32.0, CPU build) on the same
load: the same answer to ``/metrics`` (the text format whatever is asked), with the same ``vllm:`` families,
types, help texts, label names and histogram bounds; and the same behaviour where gpuscale's decisions depend
on it: the queue-time histogram moves as requests finish (the time to first token as they leave the queue),
and a client that disconnects is counted by no series, ``finished_reason="abort"`` included.

The mock is configured as the session's server runs: the model ``tiny``, 4 sequences at once, a context of
512 tokens (the token histograms' buckets follow it). Each load is sent at once to both; the real one is
read over HTTP as it runs, the mock on a clock stepped by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.agent.engines.mapping import VLLM, map_exposition, selection
from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine
from gpuscale.exposition import parse
from gpuscale.httpfetch import ACCEPT
from gpuscale.model import ModelSignals
from gpuscale.vllmcpu import MODEL_NAME, VllmServer
from tests.engine.conftest import MAX_NUM_SEQS
from tests.engine.load import Load
from tests.poll import until

MAX_MODEL_LEN = 512  # VllmServer's default


def mock_engine(clock: Callable[[], float], **config: float) -> MockEngine:
    """A mock configured as the session's vLLM: ``tiny``, 4 sequences, 512 tokens of context."""
    return MockEngine(
        MockEngineConfig(
            models=(MODEL_NAME,),
            max_num_seqs=MAX_NUM_SEQS,
            max_model_len=MAX_MODEL_LEN,
            prompt_tokens=2,
            **config,  # type: ignore[arg-type]
        ),
        clock=clock,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


# -- the families, as each parser reads them


@dataclass(frozen=True)
class Family:
    type: str
    help: str
    label_names: frozenset[str]
    label_values: frozenset[tuple[str, str]]  # of every label but model_name and le
    samples: frozenset[str]  # the sample names' suffixes after the family name: "_total", "_bucket", …
    bounds: tuple[float, ...]  # a histogram's le bounds


# labels whose values are configuration (the KV cache's size, the block size), not vocabulary
CONFIG_INFO = "vllm:cache_config_info"


def families(metrics: Iterable[Metric]) -> dict[str, Family]:
    out: dict[str, Family] = {}
    for m in metrics:
        names: set[str] = set()
        values: set[tuple[str, str]] = set()
        bounds: set[float] = set()
        for s in m.samples:
            names |= set(s.labels) - {"le"}
            if m.name != CONFIG_INFO:
                values |= {(k, v) for k, v in s.labels.items() if k not in ("model_name", "le")}
            if "le" in s.labels:
                bounds.add(float(s.labels["le"]))
        out[m.name] = Family(
            m.type,
            m.documentation,
            frozenset(names),
            frozenset(values),
            frozenset(s.name.removeprefix(m.name) for s in m.samples),
            tuple(sorted(bounds)),
        )
    return out


def read_families(text: str, openmetrics: bool) -> dict[str, Family]:
    if openmetrics:
        return families(openmetrics_families(text))  # type: ignore[no-untyped-call]
    return families(text_string_to_metric_families(text))


def gpuscale_families() -> set[str]:
    """The families gpuscale's vLLM mapping reads (its sample names, less their suffixes)."""
    out = set()
    for name in VLLM.families():
        for suffix in ("_total", "_sum", "_count", "_bucket"):
            name = name.removesuffix(suffix)
        out.add(name)
    return out


# families of the real server that are not vLLM's and that the mock leaves out: prometheus_client's default
# collectors (the server process) and prometheus-fastapi-instrumentator (the API server's HTTP requests)
NOT_VLLMS = ("python_", "process_", "http_")


async def get(session: aiohttp.ClientSession, url: str, accept: str | None) -> tuple[str, str]:
    headers = {"Accept": accept} if accept else {}
    async with session.get(url, headers=headers) as r:
        assert r.status == 200, (url, r.status)
        return r.headers["Content-Type"], await r.text()


async def test_the_mock_serves_the_real_vllms_families_types_labels_and_buckets(
    real_vllm: VllmServer,
) -> None:
    """Shows that after the same load (8 requests at once, 4 of them queued) the mock answers ``/metrics`` as
    the real vLLM does, asked plainly and with the agent's ``Accept`` (OpenMetrics preferred): the same
    content type (the text format, ``version=1.0.0``, either way) and exactly the real one's ``vllm:``
    families, each with its type, help text, label names, label vocabulary (``engine``, ``finished_reason``,
    ``source``, ``reason``, ``sleep_state``), sample suffixes and histogram bounds, the families gpuscale
    reads first; a ``_created`` series for every counter and histogram. The real server's other families are
    only ``python_*``, ``process_*`` and ``http_*``, which the mock leaves out."""
    clock = Clock()
    engine = mock_engine(clock, service_time_s=0.5, generation_tokens=64)
    server = await start_mock_engine(engine)
    try:
        async with aiohttp.ClientSession() as session:
            load = Load(real_vllm.url, session)
            for _ in range(2 * MAX_NUM_SEQS):
                load.send(64, stream=False)
            await load.drain()
            assert not load.errors, load.errors
            engine.arrive(2 * MAX_NUM_SEQS)
            clock.now += 10.0
            answers = []
            for accept in (None, ACCEPT):
                real_type, real_text = await get(session, real_vllm.metrics_url, accept)
                mock_type, mock_text = await get(session, server.url, accept)
                assert (accept, mock_type) == (accept, real_type)
                assert real_type == "text/plain; version=1.0.0; charset=utf-8", accept
                answers.append((accept, read_families(real_text, False), read_families(mock_text, False)))
    finally:
        await server.close()

    read = gpuscale_families()
    for accept, real, mock in answers:
        assert {n for n in real if not n.startswith("vllm:")} == {n for n in real if n.startswith(NOT_VLLMS)}
        real = {n: f for n, f in real.items() if n.startswith("vllm:")}
        # the series gpuscale reads, in both alike; their older names (vllm:gpu_cache_usage_perc,
        # vllm:time_per_output_token_seconds) in neither
        assert {n for n in read if n not in real} == {n for n in read if n not in mock}, accept
        for name in sorted(read & set(real)):
            assert (accept, name, mock.get(name)) == (accept, name, real[name])
        assert (accept, sorted(set(mock) - set(real))) == (accept, []), "served by the mock only"
        assert (accept, sorted(set(real) - set(mock))) == (accept, []), "served by the real vLLM only"
        for name in sorted(real):
            assert (accept, name, mock[name]) == (accept, name, real[name])
        # the text format writes each series' _created as a gauge family of its own
        created = {n.removesuffix("_created") for n in real if n.endswith("_created")}
        assert created == {n for n, f in real.items() if f.type in ("counter", "histogram")}, accept


# -- what gpuscale reads, snapshot by snapshot


def reading(text: str) -> ModelSignals:
    sample = map_exposition(VLLM, parse(text, selection(VLLM)), 0.0)
    assert sample is not None
    signals = sample.model(MODEL_NAME)
    assert signals is not None
    return signals


@dataclass(frozen=True)
class Snapshot:
    waiting: float
    running: float
    kv: float  # percent
    ttft: float  # the time-to-first-token histogram's count
    finished: float  # vllm:request_success_total, every finished_reason
    aborted: float  # finished_reason="abort"
    queue_count: float  # vllm:request_queue_time_seconds_count
    generated: float

    @classmethod
    def of(cls, text: str) -> Snapshot:
        m = reading(text)
        values = (
            m.waiting,
            m.running,
            m.kv_cache_usage,
            m.ttft.total if m.ttft is not None else None,
            m.requests_finished,
            m.requests_aborted,
            m.queue_time_count,
            m.generation_tokens,
        )
        assert all(v is not None for v in values), m
        return cls(*(float(v) for v in values))  # type: ignore[arg-type]

    def minus(self, base: Snapshot) -> Snapshot:
        """The counters since ``base``; the gauges as they are."""
        return Snapshot(
            self.waiting,
            self.running,
            self.kv,
            self.ttft - base.ttft,
            self.finished - base.finished,
            self.aborted - base.aborted,
            self.queue_count - base.queue_count,
            self.generated - base.generated,
        )


async def real_run(
    server: VllmServer,
    send: Callable[[Load], None],
    done: Callable[[Load, Snapshot], bool],
    timeout: float,
    settle: float = 0.0,
) -> tuple[list[Snapshot], Load]:
    """Send a load to the real vLLM and read its exposition every 0.2 s until ``done``, and once more
    ``settle`` seconds later: the snapshots, as counted since just before the load."""
    async with aiohttp.ClientSession() as session:
        load = Load(server.url, session)
        base = Snapshot.of((await get(session, server.metrics_url, None))[1])
        send(load)
        snapshots: list[Snapshot] = []

        async def read() -> Snapshot:
            snapshots.append(Snapshot.of((await get(session, server.metrics_url, None))[1]).minus(base))
            return snapshots[-1]

        await until(read, timeout, "the load to end", interval=0.2, ok=lambda snap: done(load, snap))
        await load.drain()
        await asyncio.sleep(settle)
        snapshots.append(Snapshot.of((await get(session, server.metrics_url, None))[1]).minus(base))
        return snapshots, load


def mock_run(engine: MockEngine, clock: Clock, n: int, seconds: float) -> list[Snapshot]:
    """``n`` requests at once to the mock, read every 0.2 s of its clock for ``seconds``."""
    base = Snapshot.of(engine.exposition()[0].decode())
    engine.arrive(n)
    snapshots = []
    for _ in range(round(seconds / 0.2)):
        clock.now += 0.2
        snapshots.append(Snapshot.of(engine.exposition()[0].decode()).minus(base))
    return snapshots


def check_counted_on_finish(snapshots: list[Snapshot], n: int, who: str) -> None:
    for s in snapshots:
        # the queue-time histogram moves with the finished counter, never as requests leave the queue
        assert s.queue_count == s.finished, (who, s)
        assert s.ttft >= s.finished, (who, s)
        assert 0.0 <= s.kv <= 100.0, (who, s)
    # seen at least once: requests out of the queue (a first token each) that the queue time does not count yet
    assert any(s.ttft > s.queue_count for s in snapshots), (who, snapshots)
    assert max(s.waiting for s in snapshots) > 0 and max(s.kv for s in snapshots) > 0, (who, snapshots)
    last = snapshots[-1]
    assert last.finished == last.queue_count == last.ttft == n and last.aborted == 0, (who, last)


async def test_queue_time_is_counted_as_requests_finish_in_both(real_vllm: VllmServer) -> None:
    """Shows that in the real vLLM and in the mock, 16 requests sent at once (12 queued behind 4) move
    ``vllm:request_queue_time_seconds_count`` only as they finish: at every reading it equals the finished
    count (``vllm:request_success_total``), while the time-to-first-token count runs ahead of both as
    requests leave the queue; and ``vllm:kv_cache_usage_perc`` stays within 0-1. What gpuscale's Little's law
    (waiting over the mean queue time) rests on."""
    n, tokens = 4 * MAX_NUM_SEQS, 256

    def send(load: Load) -> None:
        for _ in range(n):
            load.send(tokens, stream=False)  # (the client reads no token: its CPU is the server's)

    def done(load: Load, s: Snapshot) -> bool:
        return s.finished >= n and s.waiting == s.running == 0

    snapshots, load = await real_run(real_vllm, send, done, timeout=60)
    assert not load.errors, load.errors
    check_counted_on_finish(snapshots, n, "the real vLLM")

    clock = Clock()
    engine = mock_engine(clock, service_time_s=1.0, generation_tokens=tokens, prefill_s=0.01, itl_s=0.004)
    check_counted_on_finish(mock_run(engine, clock, n, seconds=10.0), n, "the mock")


def check_disconnects_uncounted(last: Snapshot, n: int, who: str, *, all_noticed: bool) -> None:
    assert last.waiting == last.running == 0, (who, last)  # the abandoned ones left the queue and the batch
    assert last.aborted == 0, (who, last)  # and no series counts them, "abort" included
    assert last.queue_count == last.finished <= n, (who, last)
    if all_noticed:
        assert last.finished < n, (who, last)


async def test_a_client_that_disconnects_is_counted_nowhere_in_both(real_vllm: VllmServer) -> None:
    """Shows that when clients give up (48 requests at once, each client disconnecting after 1 s), no series
    of the real vLLM counts them as aborted: ``vllm:request_success_total{finished_reason="abort"}`` stays 0,
    waiting and running go back to 0, and the queue-time count moves with the finished count alone. The
    requests it notices are counted nowhere; those it does not notice it serves to their end and counts
    finished. The mock with ``patience_s`` notices every one: its finished count stays below what was
    sent."""
    # enough work (48 x 480 tokens) that no machine serves it before its clients leave
    n, tokens = 12 * MAX_NUM_SEQS, 480

    def send(load: Load) -> None:
        for _ in range(n):
            load.send(tokens, timeout=1.0, stream=False)  # (as tests/engine's hang-up test: a whole answer)

    def done(load: Load, s: Snapshot) -> bool:
        return not load.tasks and s.waiting == s.running == 0

    snapshots, load = await real_run(real_vllm, send, done, timeout=60, settle=1.0)  # and nothing moves after
    assert not load.errors, load.errors
    abandoned = sum(1 for r in load.requests if r.abandoned)
    assert abandoned > 0, "no client gave up: the load is too light for this machine"
    last = snapshots[-1]
    # the real server does not always notice 48 clients leaving at once: in the full tier's runs it has
    # generated every token and counted them finished (never aborted); the hang-up test of
    # test_real_vllm_faults.py shows generation stopping where it notices
    check_disconnects_uncounted(last, n, "the real vLLM", all_noticed=False)
    served = sum(1 for r in load.requests if r.finish_reason)
    assert served <= last.finished  # a request the server finished as its client left counts as finished

    clock = Clock()
    engine = mock_engine(clock, service_time_s=1.0, generation_tokens=tokens, patience_s=1.0)
    snapshots = mock_run(engine, clock, n, seconds=10.0)
    check_disconnects_uncounted(snapshots[-1], n, "the mock", all_noticed=True)
    state = engine.models[MODEL_NAME]
    assert state.abandoned == pytest.approx(n - state.finished) and state.abandoned > 0
