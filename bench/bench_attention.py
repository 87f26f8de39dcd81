"""A compiled decode step's attention of one query (issue 20 (a)): CPU's fused SDPA kernel (``enable_gqa``, what
``DECODE_ATTENTION`` used under ``torch.compile`` before decode6) against ``decoders.one_query_attention`` (a
batched product, a softmax and sums), both compiled, at (a)'s Qwen3 3m shapes: 16 rows, 4 query heads over 2
key/value heads of 64, the keys and values a window (64 / 128 / 192 slots) of a 192-slot static cache, as
``hf_window.WindowedCache`` hands them. Times are this thread's CPU time (``time.thread_time``), best of 7 x 200
calls, the two taking turns, so other processes' load counts less than in wall time; the largest difference of
the outputs is printed too.

    PYTHONPATH=. .venv/bin/python bench/bench_attention.py
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch

from rlnb.engine.models.decoders import one_query_attention

ROWS, HEADS, KV_HEADS, DIM, SLOTS = 16, 4, 2, 64, 192


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, end: int) -> torch.Tensor:
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k[:, :, :end], v[:, :, :end], attn_mask=mask, scale=DIM**-0.5, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous()


def products(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, end: int) -> torch.Tensor:
    return one_query_attention(q, k[:, :, :end], v[:, :, :end], mask, DIM**-0.5)


def main() -> None:
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.2f}, torch {torch.__version__}; microseconds of CPU per call")
    fns: dict[str, Callable[..., torch.Tensor]] = {
        "SDPA (enable_gqa)": torch.compile(sdpa, dynamic=False),
        "one_query_attention": torch.compile(products, dynamic=False),
    }
    g = torch.Generator().manual_seed(0)
    for end in (64, 128, 192):
        q = torch.randn(ROWS, 1, HEADS, DIM, generator=g).transpose(1, 2)  # a projection's heads, as transformers
        k, v = (torch.randn(ROWS, KV_HEADS, SLOTS, DIM, generator=g) for _ in "kv")
        mask = torch.ones(ROWS, 1, 1, end, dtype=torch.bool)
        mask[..., :5] = False  # left padding
        mask[..., end - 20 :] = False  # slots not yet written
        outs = {name: fn(q, k, v, mask, end) for name, fn in fns.items()}
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(7):
            for name, fn in fns.items():
                start = time.thread_time()
                for _ in range(200):
                    fn(q, k, v, mask, end)
                best[name] = min(best[name], (time.thread_time() - start) / 200 * 1e6)
        a, b = fns
        diff = (outs[a] - outs[b]).abs().max().item()
        print(f"window {end:3d}: {a} {best[a]:6.1f}  {b} {best[b]:6.1f}  ratio {best[a] / best[b]:.2f}  "
              f"largest difference {diff:.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
