"""Scraper against the mock vLLM engine over HTTP: the negotiated format is parsed, the result is counted
under gpuscale_agent_engine_scrapes_total, and every result is exported from the start."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gpuscale.agent.engines.discovery import Endpoint
from gpuscale.agent.engines.scrape import RESULTS, Scraper, ScrapeSettings
from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine
from gpuscale.model import EngineMissing, EngineSample


async def test_scrape_the_mock_engine_and_count_it() -> None:
    clock = [1_700_000_000.0]
    engine = MockEngine(MockEngineConfig(models=("a", "b")), demand=lambda t: 30.0, clock=lambda: clock[0])
    server = await start_mock_engine(engine)
    registry = CollectorRegistry()
    scraper = Scraper(ScrapeSettings(timeout=2.0), registry, clock=lambda: clock[0])
    text = generate_latest(registry).decode()
    for result in RESULTS:
        assert f'gpuscale_agent_engine_scrapes_total{{result="{result}"}} 0.0' in text
    try:
        clock[0] += 60
        sample = await scraper.scrape(Endpoint("http", "127.0.0.1", server.port, "/metrics", "gpuscale.io"))
        missing = await scraper.scrape(Endpoint("http", "127.0.0.1", server.port, "/nothing", "gpuscale.io"))
    finally:
        await scraper.close()
        await server.close()
    assert isinstance(sample, EngineSample) and sample.timestamp == clock[0] and sample.notes == ()
    for signals in sample.models:  # demand over capacity (2 x 8 requests/s): a queue
        state = engine.models[signals.model]
        assert signals.waiting == round(state.waiting) and signals.waiting > 100
    assert missing == EngineMissing(clock[0], "http_error", "HTTP 404 Not Found")
    text = generate_latest(registry).decode()
    assert 'gpuscale_agent_engine_scrapes_total{result="ok"} 1.0' in text
    assert 'gpuscale_agent_engine_scrapes_total{result="http_error"} 1.0' in text
