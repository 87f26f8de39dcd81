"""Work per decode step of the eager sampler, counted (issue 20 (c)): torch ops dispatched and Python calls made.

On the built-in ``small`` model a decode step is dispatch-bound (its matmuls were 104 ms of a 374 ms sample of
16 x 200 tokens), so what a step dispatches is what can be cut, and counts, unlike times, are the same under any
load. The sample is the one (c) of ``bench_sampler.py`` times: 16 samples of ``n=`` at temperature 1, eager, as the
sample handler runs it; a step's count is (a sample of 33 tokens - one of 17) / 16, so the prefill cancels.

    PYTHONPATH=. .venv/bin/python bench/bench_decode_ops.py [--model small] [--rows 16]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rlnb
from rlnb.engine import sampling


class Ops(TorchDispatchMode):
    """Counts every aten op dispatched while it is on."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def sample(session: Any, rows: int, steps: int) -> tuple[Counter[str], int]:
    """(aten ops, Python calls) of one eager sample of ``rows`` x ``steps`` tokens, each counted on its own run
    (the op counter's own Python calls not among the calls)."""
    adapter, model = session.backend.adapter, session.backend.sampler
    prompt, calls = session.encode("n="), [0]

    def run() -> None:
        with torch.no_grad():
            decoder = adapter.decoder(model, rows, len(prompt) + steps)
            settings = sampling.Settings(max_tokens=steps)
            sampling.generate(decoder, [prompt], rows, settings, 0, adapter.codec, adapter.device)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls[0] += 1

    with Ops() as ops:
        run()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return ops.ops, calls[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small")
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args()
    s = rlnb.connect("local", model=args.model, device="cpu", record=False, threads=1)
    sample(s, args.rows, 17)  # warm-up: first calls take paths later ones do not
    (short, short_calls), (long, long_calls) = sample(s, args.rows, 17), sample(s, args.rows, 33)
    per_step = {op: (long[op] - short[op]) / 16 for op in long if long[op] != short[op]}
    print(f"{args.model}, {args.rows} rows, eager, torch {torch.__version__}: per decode step "
          f"{sum(per_step.values()):.1f} aten ops, {(long_calls - short_calls) / 16:.1f} Python calls")  # fmt: skip
    for op, n in sorted(per_step.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:6.2f}  {op}")
    s.close()


if __name__ == "__main__":
    main()
