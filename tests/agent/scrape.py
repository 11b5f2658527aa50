"""The agent's /metrics as a scraper reads it: one GET, and the samples of one series name."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.agent.service import Agent


async def scrape(agent: Agent, path: str = "/metrics") -> tuple[int, str]:
    """GET ``path`` on the agent's metrics port: the status and the body."""
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{agent.metrics_port}{path}") as r:
        return r.status, await r.text()


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The labels and value of every sample named ``name`` in the exposition ``text``."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out.append((s.labels, s.value))
    return out
