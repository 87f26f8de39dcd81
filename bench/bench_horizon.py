"""GRPO's FIXED_HORIZON divides the loss by samples x H, H the model's context length: does the Adam step depend on H?

Adam divides by sqrt(v) + eps: once H makes the gradients small next to eps (1e-8), the step shrinks. The same
2-layer Llama weights are saved with four context lengths (only ``max_position_embeddings`` differs), and each takes
one default GRPO forward-backward (64 prompts x 16 one-token samples) and one AdamW step (lr 1e-3), with the
FIXED_HORIZON default and with TOKEN_MEAN (no H). It prints the update's norm and its ratio to H=256's.

    python bench/bench_horizon.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import rlnb
from rlnb import samples

PROMPTS = [[i, i + 1, i + 2] for i in range(10, 74)]


def saved(root: Path, horizon: int) -> str:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=horizon, eos_token_id=None, bos_token_id=None,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(root / str(horizon))
    return str(root / str(horizon))


def update_norm(model: str, agg_type: str) -> float:
    with rlnb.connect("local", model=model, optimizer="adam", seed=0, record=False, threads=1) as s:
        out = s.sample(PROMPTS, num_samples=16, max_tokens=1, seed=1).result()
        batch = [
            samples.policy(p, list(q.tokens), list(q.logprobs), 1.0 if q.tokens[0] % 4 == 0 else -0.33)
            for p, r in zip(PROMPTS, out.results, strict=True)
            for q in r.sequences
        ]
        before = [p.detach().clone() for p in s.backend.trainer.parameters()]
        s.forward_backward(batch, "grpo", {"agg_type": agg_type})
        s.optim_step(rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.0)).result()
        moved = sum(((p.detach() - b) ** 2).sum() for p, b in zip(s.backend.trainer.parameters(), before, strict=True))
        return float(moved.sqrt())


def main() -> None:
    root = Path(tempfile.mkdtemp())
    for agg_type in ("FIXED_HORIZON", "TOKEN_MEAN"):
        first = None
        for horizon in (256, 4096, 40960, 131072):
            norm = update_norm(saved(root, horizon), agg_type)
            first = first or norm
            print(f"{agg_type:13s} H={horizon:6d}  update norm {norm:.4g}  x{norm / first:.3f} of H=256", flush=True)


if __name__ == "__main__":
    main()
