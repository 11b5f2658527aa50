"""A replica modelled by tokens: its parameters (``TokenParams``), the presets, and what follows from them.

Pure data and arithmetic; the replicas themselves run in ``batching``. A replica prefills at
``prefill_tokens_per_second`` and decodes its running sequences in steps of
``step_seconds(b) = decode_step_seconds + decode_step_seconds_per_sequence * (b - 1)`` for a batch of ``b``
(each sequence gets one token a step, so ``1 / step_seconds(b)`` tokens/s each, ``b / step_seconds(b)`` in
all); it runs at most ``max_num_seqs`` sequences, and admits a request only while its prompt + output tokens
fit in the ``kv_cache_tokens`` not yet reserved. Every preset's figures are cited in docs/simulator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PRESETS", "PRESET_GPUS", "TOKEN_KEYS", "TokenParams", "capacity_per_replica", "saturated_batch"]

# ``workload.tokens``'s keys: a preset, then the parameters in the order the docs give them
TOKEN_KEYS = (
    "preset",
    "prefillTokensPerSecond",
    "decodeStepSeconds",
    "decodeStepSecondsPerSequence",
    "maxNumSeqs",
    "kvCacheTokens",
)


@dataclass(frozen=True)
class TokenParams:
    prefill_tokens_per_second: float
    decode_step_seconds: float  # one decode step with one sequence running: the inter-token latency alone
    decode_step_seconds_per_sequence: float  # what each further running sequence adds to a step
    max_num_seqs: int  # vLLM's --max-num-seqs: sequences running at once
    kv_cache_tokens: int  # the KV cache, in tokens (vLLM logs it at start: "GPU KV cache size: N tokens")
    preset: str | None = None  # the preset the parameters came from, if any

    def step_seconds(self, batch: int) -> float:
        """Seconds of one decode step with ``batch`` sequences running (>= 1)."""
        return self.decode_step_seconds + self.decode_step_seconds_per_sequence * (max(1, batch) - 1)


# NVIDIA NIM benchmarking, "Performance" (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance):
# Llama-3.3-70b-instruct, NIM 1.8.0, 2 x H100 80G, fp8, TP2, 5000 input / 500 output tokens. TTFT at
# concurrency 1 is 406.77 ms (prefill 5000 / 0.40677 s); ITL 18.58 ms at concurrency 1 and 38.75 ms at 25
# ((38.75 - 18.58) / 24 = 0.84 ms a sequence); throughput flat from concurrency 100 (917-921 tokens/s at an
# ITL of 92.9 ms: 920 x 0.0929 = 85 sequences running), so at most 85 requests of 5,500 tokens at once.
PRESETS: dict[str, TokenParams] = {
    "llama-3.3-70b-fp8-2xh100": TokenParams(
        prefill_tokens_per_second=12292.0,
        decode_step_seconds=0.01858,
        decode_step_seconds_per_sequence=0.00084,
        max_num_seqs=85,
        kv_cache_tokens=467500,
        preset="llama-3.3-70b-fp8-2xh100",
    ),
}
# GPUs a preset's replica holds (gpusPerReplica), for the scenarios ``simulate --requests`` writes
PRESET_GPUS: dict[str, int] = {"llama-3.3-70b-fp8-2xh100": 2}


def saturated_batch(params: TokenParams, request_tokens: float) -> int:
    """The most sequences of ``request_tokens`` (prompt + output) a replica runs at once: its slots, or as
    many as its KV cache holds (at least 1)."""
    fit = math.floor(params.kv_cache_tokens / request_tokens) if request_tokens > 0 else params.max_num_seqs
    return max(1, min(params.max_num_seqs, fit))


def capacity_per_replica(params: TokenParams, mean_prompt: float, mean_output: float) -> float:
    """Requests/s one replica finishes when saturated with requests of the mean size: each costs its prefill
    (``prompt / prefill``) and its share of the decode steps of a full batch (``output * step(b) / b``)."""
    batch = saturated_batch(params, mean_prompt + mean_output)
    seconds = (
        mean_prompt / params.prefill_tokens_per_second + mean_output * params.step_seconds(batch) / batch
    )
    return 1 / seconds if seconds > 0 else float(params.max_num_seqs)
