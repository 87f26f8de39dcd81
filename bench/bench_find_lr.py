"""Find LR on the sessions a teacher has: where the flat threshold comes from, and what Muon suggests.

For each seed, 30-step range tests (the widget's default) with the values of the digits-era default preset
(``DIGITS_PRESET``: AdamW 1e-2, Muon 0.05 with AdamW 1e-2, which solves digits in ~40 steps) on the built-in
tiny model and the digits task, on:

* a fresh Adam session, and a fresh Muon session (step 0);
* a Muon session after 6 steps (notebook 05's Step, then Run N with N = 5, when it trained digits);
* Adam and Muon sessions trained ``--trained`` steps with the preset (the reward is ~1.0: converged).

Each row prints the smoothed curve's rise before its best point as a fraction of its size (``rise``, what
``rlnb.sweep.find_lr.FLAT`` is compared with), the suggestion and its reason. On Muon sessions it also
runs the old sweep, Muon's rate alone with the AdamW part held at the preset's 1e-2 (``muon only``).

    python bench/bench_find_lr.py [--seeds 0,1,2,3,4] [--trained 40]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

import rlnb
from rlnb.sweep import lr_find
from rlnb.sweep.lr_curve import FLAT, rise
from rlnb.tasks import digits_task, rl_step

DIGITS_PRESET = {
    "adam": {
        "learning_rate": 1e-2,
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-8,
        "weight_decay": 0.0,
        "grad_clip_norm": 1.0,
    },
    "muon": {
        "learning_rate": 0.05,
        "momentum": 0.95,
        "newton_schulz_steps": 5,
        "weight_decay": 0.0,
        "grad_clip_norm": 1.0,
    },
}
"""The values this bench's figures (bench/README.md) were measured with."""


def preset(kind: str) -> rlnb.AdamParams | rlnb.MuonParams:
    if kind == "adam":
        return rlnb.AdamParams(**DIGITS_PRESET["adam"])
    return rlnb.MuonParams(**DIGITS_PRESET["muon"], adam=DIGITS_PRESET["adam"])


def trained(kind: str, seed: int, steps: int) -> tuple[rlnb.Session, float]:
    session = rlnb.connect("local", optimizer=kind, seed=seed, device="cpu", record=False)
    reward = float("nan")
    for i in range(steps):
        reward = rl_step(session, digits_task(), preset(kind), seed=seed * 100_003 + i).reward
    return session, reward


def muon_alone(base: rlnb.MuonParams):
    """The old sweep: the range test's params with the AdamW part put back to ``base``'s."""
    task, adam = digits_task(), base.adam

    def step(session, params, i):
        return rl_step(session, task, params.model_copy(update={"adam": adam}), seed=i).reward

    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--trained", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("command: python bench/bench_find_lr.py " + " ".join(sys.argv[1:]))
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}; FLAT = {FLAT}")
    print(f"{'session':<38} {'seed':>4} {'reward':>6} {'rise':>6} {'suggestion':>10}  reason")
    runs = tempfile.mkdtemp(prefix="bench-find-lr-")
    rises: dict[str, list[float]] = {"fresh": [], "converged": []}
    started = time.perf_counter()
    for seed in (int(s) for s in args.seeds.split(",")):
        cases = [
            ("fresh adam", "adam", 0, "fresh"),
            ("fresh muon", "muon", 0, "fresh"),
            ("notebook 05 muon (6 steps)", "muon", 6, "fresh"),
            (f"adam trained {args.trained} steps", "adam", args.trained, "converged"),
            (f"muon trained {args.trained} steps", "muon", args.trained, "converged"),
        ]
        for name, kind, steps, group in cases:
            session, reward = trained(kind, seed, steps)
            variants = [("", None)] + ([(" (muon only)", muon_alone(preset("muon")))] if kind == "muon" else [])
            for label, step_fn in variants:
                seeded = {} if step_fn else {"seed": seed}  # a step_fn seeds its own steps: lr_find refuses one
                found = lr_find(preset(kind), session, steps=30, step_fn=step_fn, runs_dir=runs, **seeded)
                if found.interrupted:  # lr_find keeps a Ctrl-C's result and goes on: the bench stops here
                    session.close()
                    raise KeyboardInterrupt
                r = rise(found.smoothed, "reward")
                if not label:
                    rises[group].append(r)
                shown = "none" if found.suggestion is None else f"{found.suggestion:g}"
                reason = found.reason.split(";")[0] if label else found.reason  # its AdamW part stayed at 1e-2
                print(f"{name + label:<38} {seed:>4} {reward:>6.2f} {r:>6.3f} {shown:>10}  {reason[:80]}")
            session.close()
    print(
        f"rise, fresh sessions: {min(rises['fresh']):.3f}-{max(rises['fresh']):.3f}; "
        f"converged: {min(rises['converged']):.3f}-{max(rises['converged']):.3f}; FLAT = {FLAT}: "
        + ("PASS" if max(rises["converged"]) < FLAT < min(rises["fresh"]) else "FAIL")
        + f" ({time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
