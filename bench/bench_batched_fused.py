"""Same-process A/B of ``rlnb.batched.fused`` (batched7): a 16-member stacked ``tiny`` model's forward-backward (48
rows x 12 tokens, the bench's demo step) with vmap's own linear layers and ``losses.logprobs_and_entropy`` (old)
against ``fused.linear`` and ``fused.target_logprobs`` (new), taking turns; then 8 decoding steps, the same code in
both, as a control: its ratio is the noise of the machine at that time. Min and median of ``--reps`` each.

    python bench/bench_batched_fused.py [--reps 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from rlnb.batched import fused
from rlnb.batched.stacked import StackedModel
from rlnb.engine import losses
from rlnb.engine.models.tiny import TinyConfig, build_model

K, B, W = 16, 48, 12


def models() -> dict[str, StackedModel]:
    modules = [build_model(TinyConfig(), seed) for seed in range(K)]
    names = [n for n, _ in modules[0].named_parameters()]
    fused_linear = fused.linear
    fused.linear = lambda layer, x: torch.nn.functional.linear(x, layer.weight, layer.bias)  # vmap's own rule
    try:
        old = StackedModel(modules, names)
    finally:
        fused.linear = fused_linear
    return {"old": old, "new": StackedModel(modules, names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.1f} at the start")
    stacked = models()
    g = torch.Generator().manual_seed(0)
    ids, targets = torch.randint(0, 256, (2, K, B, W), generator=g)
    where = torch.rand(K, B, W, generator=g) < 0.67  # the completion tokens of a 4-token prompt, 8 sampled

    def forward_backward(name: str) -> None:
        model = stacked[name]
        if name == "old":
            lp, _ = losses.logprobs_and_entropy(model._forward(model.params, ids), targets, where)
        else:
            lp, _ = model.logprobs(ids, targets, where)
        model.backward((lp * where).sum())

    def decoding(name: str) -> None:
        decoder = stacked[name].decoder(B, 13)
        decoder.prefill(torch.randint(0, 256, (K * B, 5), generator=g), torch.ones(K * B, 5, dtype=torch.long))
        for _ in range(8):
            decoder.step(torch.zeros(K * B, dtype=torch.long))

    work: dict[str, Callable[[str], None]] = {"forward-backward": forward_backward, "decoding (control)": decoding}
    for label, fn in work.items():
        times: dict[str, list[float]] = {"old": [], "new": []}
        for name in times:  # warm-up
            fn(name)
        for _ in range(args.reps):
            for name in times:
                start = time.perf_counter()
                fn(name)
                times[name].append(time.perf_counter() - start)
        old, new = times["old"], times["new"]
        print(
            f"    {label}: old min {min(old) * 1e3:.1f} ms, median {statistics.median(old) * 1e3:.1f}; new min "
            f"{min(new) * 1e3:.1f} ms, median {statistics.median(new) * 1e3:.1f}; new / old {min(new) / min(old):.3f} "
            f"(min), {statistics.median(new) / statistics.median(old):.3f} (median)"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
