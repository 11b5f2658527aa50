"""The real agent reads the real vLLM: found through the pod's annotation, every signal gpuscale scales on
mapped from the server's own exposition."""

from __future__ import annotations

import aiohttp

from gpuscale.model import EngineSample
from gpuscale.vllmcpu import MODEL_NAME, VllmServer
from tests.engine.load import Load
from tests.engine.pods import add_vllm_pod
from tests.poll import until
from tests.scaler.conftest import Cluster


async def test_the_agent_reads_every_signal_gpuscale_uses_from_the_real_vllm(
    cluster: Cluster, real_vllm: VllmServer
) -> None:
    node = await cluster.node("node-1", "constant:50", gpus=1, interval=0.5)
    add_vllm_pod(cluster, "node-1", "llm-0", 0, real_vllm.port)
    async with aiohttp.ClientSession() as session:
        load = Load(real_vllm.url, session)
        for _ in range(12):
            load.send(48)
        await load.drain()
        assert not load.errors, load.errors

    def latest() -> EngineSample | None:
        history = node.agent.state.engine_history.get(("default", "llm-0"))
        return history[-1] if history else None

    def complete() -> bool:
        s = latest()
        m = s.model(MODEL_NAME) if s is not None else None
        return m is not None and m.requests_finished is not None and m.requests_finished >= 12

    await until(complete, timeout=20, what="the agent's reading of the real vLLM after 12 requests")
    sample = latest()
    assert sample is not None and sample.engine == "vllm" and not sample.notes, sample
    m = sample.model(MODEL_NAME)
    assert m is not None
    for name in (
        "waiting",
        "running",
        "kv_cache_usage",
        "ttft",
        "itl",
        "prompt_tokens",
        "generation_tokens",
        "requests_finished",
        "requests_aborted",
        "queue_time_sum",
        "queue_time_count",
    ):
        assert getattr(m, name) is not None, (name, m)
    assert m.generation_tokens is not None and m.generation_tokens >= 12 * 48
    assert m.ttft is not None and m.ttft.total >= 12
    assert m.queue_time_count is not None and m.queue_time_count >= 12
