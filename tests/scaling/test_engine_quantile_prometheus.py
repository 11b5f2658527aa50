"""``gpuscale.scaling.engine.quantile`` answers what a real Prometheus' ``histogram_quantile`` answers for the
same buckets (Debian's prometheus, scraping the histograms from a loopback endpoint)."""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path

import pytest
from aiohttp import web

from gpuscale.backends.mock_engine import TTFT_BUCKETS
from gpuscale.model import BucketCounts
from gpuscale.scaling.engine import quantile
from tests.fakes.prometheus import prometheus_binary, run_prometheus

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binary() is None, reason="Debian's prometheus package is not installed"),
]

INF = math.inf
rng = random.Random(7)
_steps = [rng.choice([0, 0, 1, 3, 10, 50]) for _ in range(len(TTFT_BUCKETS) + 1)]
CASES = {
    "plain": BucketCounts((0.1, 0.5, 1.0, INF), (10, 30, 40, 40)),
    "tail_in_inf": BucketCounts((0.1, 0.5, 1.0, INF), (10, 30, 40, 50)),
    "first_only": BucketCounts((0.1, INF), (5, 5)),
    "empty_buckets": BucketCounts((0.1, 0.5, 1.0, 2.0, INF), (0, 0, 7, 7, 7)),
    "vllm_ttft": BucketCounts(
        (*TTFT_BUCKETS, INF), tuple(float(sum(_steps[: i + 1])) for i in range(len(TTFT_BUCKETS) + 1))
    ),
}
QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)


def exposition() -> str:
    lines = ["# TYPE latency_seconds histogram"]
    for case, h in CASES.items():
        for bound, count in zip(h.bounds, h.counts, strict=True):
            le = "+Inf" if bound == INF else repr(bound)
            lines.append(f'latency_seconds_bucket{{case="{case}",le="{le}"}} {count}')
        lines.append(f'latency_seconds_count{{case="{case}"}} {h.counts[-1]}')
        lines.append(f'latency_seconds_sum{{case="{case}"}} 1.0')
    return "\n".join(lines) + "\n"


async def test_quantile_matches_prometheus(tmp_path: Path) -> None:
    body = exposition()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]

    def check() -> dict[tuple[str, float], tuple[float | None, float]]:
        out = {}
        with run_prometheus(tmp_path, [f"127.0.0.1:{port}"]) as prom:
            prom.wait_for("latency_seconds_count", min_series=len(CASES))
            for q in QS:
                for r in prom.query(f"histogram_quantile({q}, latency_seconds_bucket)"):
                    case = r["metric"]["case"]
                    out[(case, q)] = (quantile(q, CASES[case]), float(r["value"][1]))
        return out

    try:
        answers = await asyncio.to_thread(check)
    finally:
        await runner.cleanup()
    assert len(answers) == len(CASES) * len(QS)
    differ = {
        key: (ours, theirs)
        for key, (ours, theirs) in answers.items()
        if (ours is None) != math.isnan(theirs)
        or (ours is not None and not math.isclose(ours, theirs, abs_tol=1e-12))
    }
    assert differ == {}
    assert answers[("empty_buckets", 0.0)] == (None, pytest.approx(math.nan, nan_ok=True))  # 0/0 both ways
