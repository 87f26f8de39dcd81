"""A gated MLP's ``gate`` and ``up`` as one packed product (``rlnb.engine.models.packed.PackedGatedMLP``) against
the two apart, in one process: bench_sampler's (a) models and sample (16 prompts x 160 tokens, temperature 1,
as the sample handler runs it), eager or compiled, contenders alternating, best of ``--reps`` of each one's own
CPU time (``time.thread_time``: the 2 vCPUs are shared). Also counted: products a decode step (the profiler's
matmul events / tokens, eager), bytes of packed weight copies, and whether the two give the same tokens and
log-probs.

    PYTHONPATH=. .venv/bin/python bench/bench_gated_pair.py [--sizes 3m,21m] [--reps 5] [--eager]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from bench_sampler import BATCH, MATMULS, NEW, decode, load, packed_bytes, prompts_for, qwen3

from rlnb.engine.models import packed
from rlnb.engine.models.compiled import Compiler
from rlnb.engine.models.factory import build_adapter

PRODUCTS = (*MATMULS, "rlnb::packed_linear", "rlnb::packed_pair")


def contender(size: str, pair: bool, compiled: bool) -> tuple[Callable[[], object], int]:
    """One sample of (a)'s model packed as the sampler copy is (``pair``: gate and up as one product), and the
    bytes of its packed copies."""
    adapter = build_adapter(qwen3(size), device=torch.device("cpu"))
    keep = packed._pack_gated
    if not pair:
        packed._pack_gated = lambda module, min_elements: False  # the packing without pairs
    try:
        packed.pack(adapter.module)
    finally:
        packed._pack_gated = keep
    copies = packed_bytes(adapter.module)
    prompts = prompts_for(adapter.vocab_size, BATCH)
    return decode(adapter, adapter.module, prompts, 1, NEW, Compiler(adapter.device) if compiled else None, 1), copies


def products_a_step(run: Callable[[], object]) -> float:
    from torch.profiler import profile

    with profile() as prof:
        run()
    return sum(e.count for e in prof.key_averages() if e.key in PRODUCTS) / NEW


def compare(size: str, reps: int, compiled: bool) -> None:
    runs, outs = {}, {}
    for name, pair in (("pair", True), ("apart", False)):
        runs[name], copies = contender(size, pair, compiled)
        start = time.perf_counter()
        outs[name] = runs[name]()
        print(
            f"{size} {name}: packed copies {copies / 2**20:.2f} MiB; first sample {time.perf_counter() - start:.1f} s"
        )
        if not compiled:
            print(f"{size} {name}: {products_a_step(runs[name]):.1f} products a decode step")
    seqs = {k: [q for g in v for q in g] for k, v in outs.items()}  # type: ignore[attr-defined]
    same = [q.tokens for q in seqs["pair"]] == [q.tokens for q in seqs["apart"]]
    diff = max(
        abs(a - b)
        for p, q in zip(seqs["pair"], seqs["apart"], strict=True)
        for a, b in zip(p.logprobs, q.logprobs, strict=True)
    )
    print(f"{size}: same tokens {same}, largest log-prob difference {diff:.1e}")
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(reps):
        for name, run in runs.items():
            start = time.thread_time()
            run()
            best[name] = min(best[name], time.thread_time() - start)
    mode = "compiled" if compiled else "eager"
    print(
        f"{size} {mode}, {load()}: pair {best['pair'] * 1e3:.1f} ms, apart {best['apart'] * 1e3:.1f} ms of CPU, "
        f"pair / apart {best['pair'] / best['apart']:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="3m")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--eager", action="store_true", help="eager decoding (default: as with compile=True)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for size in args.sizes.split(","):
        compare(size, args.reps, not args.eager)


if __name__ == "__main__":
    main()
