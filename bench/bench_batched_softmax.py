"""Same-process A/B of ``stacked.batched_attention``'s softmax layout (batched8): scores laid out queries by keys with
the softmax over the last dimension (old) against keys by queries with the softmax over dimension -2 (new), in a
16-member stacked ``tiny`` model's forward-backward (48 rows x 12 tokens, the bench's demo step) and in its 8 decoding
steps after a 5-token prefill, taking turns. First the softmax alone, per element, over a last dimension of 5..32
against dimension -2: torch's CPU kernel for a last dimension narrower than its vector (16 floats with AVX-512) is the
slow one. Min and median of ``--reps`` each, in CPU time of the calling thread (``time.thread_time``: at 1 torch
thread the ops run on it), which a loaded machine's waits do not count; the load average printed at the start.

    python bench/bench_batched_softmax.py [--reps 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from rlnb.batched import stacked
from rlnb.batched.stacked import StackedModel
from rlnb.engine.models.tiny import CausalSelfAttention, TinyConfig, build_model

K, B, W, PROMPT, TOKENS = 16, 48, 12, 5, 8


def last_dim_attention(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False
) -> Tensor:
    """``batched_attention`` with the scores queries by keys, the softmax over the last dimension (before batched8)."""
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if is_causal:
        T, S = scores.shape[-2:]
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def timed(fn: Callable[[], object]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def softmax_alone(reps: int) -> None:
    """ns an element of a softmax over ~440k elements, over the last dimension and over dimension -2."""
    for width in (5, 12, 13, 15, 16, 32):
        x = torch.randn(442_368 // width, width)
        xt = x.t().contiguous()
        last = min(timed(lambda: torch.softmax(x, -1)) for _ in range(reps)) / x.numel() * 1e9  # noqa: B023
        other = min(timed(lambda: torch.softmax(xt, 0)) for _ in range(reps)) / x.numel() * 1e9  # noqa: B023
        print(
            f"    softmax over {width:2d}: last dim {last:5.2f} ns an element, "
            f"dim -2 {other:5.2f} ns ({last / other:.1f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.1f} at the start")
    softmax_alone(args.reps)
    modules = [build_model(TinyConfig(), seed) for seed in range(K)]
    model = StackedModel(modules, [n for n, _ in modules[0].named_parameters()])
    layers = [m for m in model.base.modules() if isinstance(m, CausalSelfAttention)]
    kernels = {"old": last_dim_attention, "new": stacked.batched_attention}
    g = torch.Generator().manual_seed(0)
    ids, targets = torch.randint(0, 256, (2, K, B, W), generator=g)

    def forward_backward() -> None:
        lp, _ = model.logprobs(ids, targets)
        model.backward(lp.sum())

    def decoding() -> None:
        decoder = model.decoder(B, PROMPT + TOKENS)
        logits = decoder.prefill(ids[:, :, :PROMPT].reshape(K * B, PROMPT), torch.ones(K * B, PROMPT, dtype=torch.long))
        for _ in range(TOKENS):
            logits = decoder.step(logits.argmax(-1))

    times: dict[tuple[str, str], list[float]] = {}
    for rep in range(args.reps + 1):  # the first round warms up, untimed
        for name, kernel in kernels.items():
            for layer in layers:
                layer.attention = kernel
            for part, fn in (("forward-backward", forward_backward), ("decoding", decoding)):
                took = timed(fn)
                if rep:
                    times.setdefault((part, name), []).append(took)
    for part in ("forward-backward", "decoding"):
        old, new = times[(part, "old")], times[(part, "new")]
        print(
            f"    {part} (CPU): old min {min(old) * 1e3:.1f} ms median {statistics.median(old) * 1e3:.1f}, new min "
            f"{min(new) * 1e3:.1f} median {statistics.median(new) * 1e3:.1f}: new / old {min(new) / min(old):.3f} "
            f"(min), {statistics.median(new) / statistics.median(old):.3f} (median)"
        )


if __name__ == "__main__":
    main()
