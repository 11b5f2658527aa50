"""Write a tiny random Llama and its tokenizer into a directory, the same bytes every time.

Run by the engine environment's own Python (``<venv>/bin/python tinymodel.py OUT``), which has ``torch``,
``transformers`` and ``tokenizers``; it imports nothing of gpuscale. No model hub is reachable here, and the
engine tier needs a model only for its shape, not its words: two layers, hidden size 64, two heads of 32
(a head size vLLM's CPU attention supports), a byte-level BPE vocabulary (at most 2,048 tokens; the
model's vocabulary is the tokenizer's, so every id it samples decodes) trained on a text made here from a
fixed seed, bf16 weights from ``torch.manual_seed(0)``. About 820 KB.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB = 2048
MAX_LEN = 512
_WORDS = (
    "gpu scale replica pod node queue cache token request engine serve model batch prefill decode "
    "latency throughput memory power cluster workload demand arrive finish wait run abort restart "
    "the a of to and in is it that for on with as at by from this be are or an was will can not"
).split()


def _corpus(lines: int = 4000) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 24))) for _ in range(lines)]


def write(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", model_max_length=MAX_LEN
    )
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),  # every id the model can sample decodes
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=MAX_LEN,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "gpuscale-tinymodel.json").write_text(
        json.dumps({"parameters": sum(p.numel() for p in model.parameters()), "vocab": len(fast)}) + "\n"
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: tinymodel.py OUT_DIR", file=sys.stderr)
        raise SystemExit(2)
    write(Path(sys.argv[1]))
