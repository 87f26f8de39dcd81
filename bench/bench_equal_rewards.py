"""docs/tasks.md's "A step of equal rewards teaches nothing, yet the weights move", on seeds 0-9.

Per seed, on the built-in tiny model: one ``rl_step`` of digits, then five of a task that rewards every completion
1.0 (every advantage 0, so the loss and the gradient are 0); printed, how far those five steps move the weights
against the first step, ``||w6 - w1|| / ||w1 - w0||`` over all weights, with Adam (2e-3) and Muon (0.02).

    python bench/bench_equal_rewards.py [--seeds 0-9]
"""

from __future__ import annotations

import argparse

import torch
from bench_lessons import seeds_arg

import rlnb
from rlnb.tasks import Task, digits_task, rl_step

RATES = {"adam": rlnb.AdamParams(learning_rate=2e-3), "muon": rlnb.MuonParams(learning_rate=0.02)}


def flat(session: rlnb.Session) -> torch.Tensor:
    split = session.backend.optim.split  # type: ignore[attr-defined]  # a local session's optimizer groups
    return torch.cat([p.detach().float().reshape(-1).clone() for _, p in list(split.muon) + list(split.adam)])


def ratio(kind: str, seed: int) -> float:
    digits = digits_task()
    constant = Task("constant", digits.prompts, lambda prompt, completion: 1.0)
    with rlnb.connect("local", model="tiny", optimizer=kind, seed=seed, device="cpu", record=False, threads=1) as s:
        w0 = flat(s)
        rl_step(s, digits, RATES[kind], seed=seed * 1_000_003)
        w1 = flat(s)
        for i in range(1, 6):
            rl_step(s, constant, RATES[kind], seed=seed * 1_000_003 + i)
        w6 = flat(s)
    return float((w6 - w1).norm() / (w1 - w0).norm())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5-7")
    given = parser.parse_args().seeds
    seeds = seeds_arg(given)
    torch.set_num_threads(1)
    print(f"command: python bench/bench_equal_rewards.py --seeds {given}")
    for kind in RATES:
        ratios = [ratio(kind, seed) for seed in seeds]
        print(f"{kind}: {', '.join(f'{r:.2f}' for r in ratios)}; {min(ratios):.2f}-{max(ratios):.2f}x", flush=True)


if __name__ == "__main__":
    main()
