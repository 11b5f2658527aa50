"""``gpuscale calibrate`` against the real vLLM under a load the test drives: one request at a time, then four
at once (closed loops: each client sends its next request when its last one ends), one window each, the first
saved with ``--save`` and given back as ``--before``/``--after``. The block it writes (``--partial``: the
slope may be refused, below) loads in the simulator, and its figures are the engine's: ``maxNumSeqs`` the server's, the KV cache the server's blocks where
``vllm:cache_config_info`` says them (else the flag), a decode step that fits in the requests the clients
timed."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from gpuscale.cli import main
from gpuscale.vllmcpu import VllmServer
from tests.calibrated import load_block
from tests.engine.conftest import KV_BLOCKS, MAX_NUM_SEQS
from tests.engine.load import Load, client_session
from tests.engine.pods import vllm_apart  # noqa: F401  (a fixture)

pytestmark = pytest.mark.usefixtures("vllm_apart")

TOKENS = 100  # prompt and answer fit in one KV block (the CPU build's hold 128 tokens): no preemption
WINDOW = 6.0  # seconds each window measures
WARM = 1.0  # seconds of load before a window starts


async def closed_loops(load: Load, clients: int, seconds: float) -> None:
    """``clients`` clients, each sending its next request as its last one ends, for ``seconds``."""
    end = time.time() + seconds

    async def client() -> None:
        while time.time() < end:
            sent = load.send(TOKENS, stream=False)
            while sent.done is None:
                await asyncio.sleep(0.005)

    await asyncio.gather(*(client() for _ in range(clients)))


async def window(load: Load, clients: int, argv: list[str]) -> int:
    """``gpuscale calibrate ARGV`` (its --engine window) while ``clients`` closed loops run."""
    running = asyncio.create_task(closed_loops(load, clients, WARM + WINDOW + 1.0))
    await asyncio.sleep(WARM)
    code = await asyncio.to_thread(
        main, ["--log-level", "error", "calibrate", *argv, "--seconds", str(WINDOW)]
    )
    await running
    return code


async def test_calibrate_writes_a_preset_of_the_real_vllm(
    real_vllm: VllmServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    out = tmp_path / "preset.yaml"
    async with client_session() as session:
        load = Load(real_vllm.url, session)
        engine = ["--engine", real_vllm.metrics_url]
        assert await window(load, 1, [*engine, "--save", str(first), "--partial"]) == 0
        alone = sorted(r.done - r.sent for r in load.requests if r.done is not None)
        blocks = re.search(r'num_gpu_blocks="(\d+)"', (first / "before.txt").read_text())
        block_size = re.search(r'[{,]block_size="(\d+)"', (first / "before.txt").read_text())
        kv = [] if blocks else ["--kv-cache-tokens", str(KV_BLOCKS * 128)]
        saved = ["--before", str(first / "before.txt"), "--after", str(first / "after.txt")]
        flags = ["--max-num-seqs", str(MAX_NUM_SEQS), *kv, "--out", str(out), "--partial"]
        code = await window(load, MAX_NUM_SEQS, [*saved, *engine, *flags])
        await load.drain()
    assert code == 0, capsys.readouterr().err
    assert not load.errors, load.errors
    block = out.read_text()
    if "  # decodeStepSecondsPerSequence: missing:" in block:
        # the CPU build's decode step need not grow from one sequence of the tiny model to four (per-step
        # overhead sets it, not compute): calibrate says so, with both steps, rather than write a slope
        assert "fell by" in block and "step(1)" in block, block
        block = block.replace(
            "  # decodeStepSecondsPerSequence: missing:", "  decodeStepSecondsPerSequence: 0  #"
        )
    assert ": missing:" not in block, block  # every other figure derived
    params = load_block(block)
    assert params.max_num_seqs == MAX_NUM_SEQS
    if blocks is not None:
        assert block_size is not None and int(blocks[1]) == KV_BLOCKS, block
        assert params.kv_cache_tokens == KV_BLOCKS * int(block_size[1]), block
    assert params.prefill_tokens_per_second > 0 and params.decode_step_seconds_per_sequence >= 0, block
    # one request alone decodes its tokens in decodeStepSeconds each: within what its client timed (median)
    assert 0 < params.decode_step_seconds * (TOKENS - 1) <= alone[len(alone) // 2], (block, alone)
