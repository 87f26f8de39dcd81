"""Notebook 03's "Too large (1.0)": how far Adam's first step moves the weights, on seeds 0-9.

One ``rl_step`` of the first-letter task at AdamW 1.0 (weight decay 0, clip 1: notebook 03's base) on the built-in
tiny model per seed: the share of weight elements whose move is within 0.5-1.5x the rate, the share that does not
move at all, and the tensors mostly unmoved (the embeddings of bytes and positions the prompts never use: a zero
gradient is a zero Adam step).

    python bench/bench_first_step.py [--seeds 0-9]
"""

from __future__ import annotations

import argparse

import torch
from bench_lessons import seeds_arg

import rlnb
from rlnb.tasks import first_letter_task, rl_step

LR = 1.0


def weights(session: rlnb.Session) -> dict[str, torch.Tensor]:
    split = session.backend.optim.split  # type: ignore[attr-defined]  # a local session's optimizer groups
    return {n: p.detach().float().clone() for n, p in list(split.muon) + list(split.adam)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5-7")
    given = parser.parse_args().seeds
    seeds = seeds_arg(given)
    torch.set_num_threads(1)
    print(f"command: python bench/bench_first_step.py --seeds {given}")
    task = first_letter_task()
    for seed in seeds:
        with rlnb.connect(
            "local", optimizer="adam", model="tiny", seed=seed, device="cpu", record=False, threads=1
        ) as s:
            before = weights(s)
            rl_step(s, task, rlnb.AdamParams(learning_rate=LR, weight_decay=0.0), seed=seed * 1_000_003)
            after = weights(s)
        moved = torch.cat([(after[n] - before[n]).abs().reshape(-1) for n in before])
        still = {n: float(((after[n] - before[n]) == 0).float().mean()) for n in before}
        mostly = sorted(((v, n) for n, v in still.items() if v > 0.5), reverse=True)[:3]
        within = float(((moved > 0.5 * LR) & (moved < 1.5 * LR)).float().mean())
        print(
            f"seed {seed}: {moved.numel()} weights, within 0.5-1.5x lr {within:.3f}, unmoved "
            f"{float((moved == 0).float().mean()):.3f}; mostly unmoved {[(n, round(v, 3)) for v, n in mostly]}",
            flush=True,
        )


if __name__ == "__main__":
    main()
