"""The token choice alone: eager ``choice.pick`` against the compiled ``choice`` (``choice.compiled_pick`` with
compiling forced on, as on a GPU), 16 rows, per vocabulary and kind of choice, on this thread. Prints the CPU time
of a call (best of 5 rounds, the two alternating) and compiled / eager: the figures behind ``choice.compiles``.

    .venv/bin/python bench/bench_choice.py [--rows 16] [--vocabs 256,1024,4096,8192,151936]
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import torch

from rlnb.engine import choice, sampling
from rlnb.engine.models.compiled import Compiler

KINDS = ({"temperature": 1.0}, {"temperature": 1.0, "top_p": 0.9, "top_k": 50}, {"temperature": 0.0})


def per_call(fn: object, calls: int) -> float:
    start = time.thread_time()
    for _ in range(calls):
        fn()  # type: ignore[operator]
    return (time.thread_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--vocabs", default="256,1024,4096,8192,151936")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    choice.compiles = lambda device, greedy, vocab: True  # the compiled choice whatever the device (as on a GPU)
    compiler = Compiler(cpu)
    print(f"load average {os.getloadavg()[0]:.2f}; torch {torch.__version__}, 1 thread, {args.rows} rows")
    for vocab in map(int, args.vocabs.split(",")):
        for kind in KINDS:
            settings = sampling.Settings(max_tokens=1, **kind)
            logits, u = torch.randn(args.rows, vocab), torch.rand(args.rows, 1)
            compiled = choice.compiled_pick(compiler, settings, torch.float32, args.rows, vocab, cpu)
            eager = partial(choice.pick, logits, u, settings.temperature, settings.top_p, settings.top_k)
            comp = partial(compiled, logits, u)
            assert torch.equal(comp()[0], eager()[0])  # compiles; the same tokens
            calls, best = max(20, 400_000 // vocab), {"eager": float("inf"), "compiled": float("inf")}
            for _ in range(5):
                best["eager"] = min(best["eager"], per_call(eager, calls))
                best["compiled"] = min(best["compiled"], per_call(comp, calls))
            print(f"vocab {vocab:6d} {str(kind):52s} eager {best['eager']:8.1f} µs  compiled {best['compiled']:8.1f} "
                  f"µs  compiled / eager {best['compiled'] / best['eager']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
