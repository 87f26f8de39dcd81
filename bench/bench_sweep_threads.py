"""A trial's numbers against the torch thread count and the executor, on one machine: Adam at lr 0.03 on the digits
task, 6 RL steps, seeds 0-9, each on ``executor="threads"`` and ``"batched"`` at ``threads=1`` and ``threads=2``.
Prints each seed's ``final_reward`` and, per pair of settings, on how many seeds they differ and by how much.

    python bench/bench_sweep_threads.py [--lr 0.03] [--steps 6] [--seeds 10]
"""

from __future__ import annotations

import argparse
import tempfile

import pandas as pd

import rlnb
from rlnb.sweep import sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    rewards = {}
    for executor in ("threads", "batched"):
        for threads in (1, 2):
            trials = sweep(rlnb.AdamParams(), [{"learning_rate": args.lr}], seeds=list(range(args.seeds)),
                           steps=args.steps, runs_dir=tempfile.mkdtemp(), executor=executor, threads=threads,
                           progress=False)  # fmt: skip
            rewards[f"{executor}/{threads}"] = trials.set_index("seed").final_reward
    table = pd.DataFrame(rewards)
    print(table.round(6).to_string())
    pairs = [("threads/1", "threads/2"), ("batched/1", "batched/2"), ("threads/1", "batched/1"),
             ("threads/2", "batched/2")]  # fmt: skip
    for a, b in pairs:
        differ = table[a] != table[b]
        print(f"{a} vs {b}: differ on {int(differ.sum())} of {len(table)} seeds, "
              f"max |diff| {float((table[a] - table[b]).abs().max()):.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
