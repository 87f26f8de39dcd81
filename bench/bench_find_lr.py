"""Find LR on the sessions a teacher has: where the flat threshold comes from, and what Muon suggests.

For each seed, 30-step range tests (the widget's default) with the values of the digits-era default preset
(``DIGITS_PRESET``: AdamW 1e-2, Muon 0.05 with AdamW 1e-2, which solves digits in ~40 steps) on the built-in
tiny model and the digits task, on:

* a fresh Adam session, and a fresh Muon session (step 0);
* a Muon session after 6 steps (notebook 05's Step, then Run N with N = 5, when it trained digits);
* Adam and Muon sessions trained ``--trained`` steps with the preset (the reward is ~1.0: converged).

Each row prints the smoothed curve's rise before its best point as a fraction of its size (``rise``, what
``rlnb.sweep.lr.find.FLAT`` is compared with), the suggestion and its reason. On Muon sessions it also
runs the old sweep, Muon's rate alone with the AdamW part held at the preset's 1e-2 (``muon only``).

With ``--notebook05`` it runs notebook 05's panel instead, as the notebook builds it: ``OptimizerBuilder("muon",
total_steps=40)`` (the default preset, Muon 0.05 with AdamW 2e-3, cosine with warmup 3), a ``RunPanel`` on a Muon
session of ``seed``, Step then Run 5 on the first_letter task, and the panel's Find LR (``lr_finder.run()``, its own
settings: 30 steps of the panel's task), printing its status line per seed.

With ``--learns RATES`` (one Muon rate per seed of ``--seeds``: the suggestions ``--notebook05`` printed) it trains
a fresh Muon session of each seed ``LESSON_STEPS`` steps of first_letter at a constant rate of the default preset
scaled to that rate (its AdamW part at the preset's ratio, as Apply sets it) and at a tenth of it, and says whether
each learns by the default preset's lesson (``rlnb.widgets.presets.LESSONS``), as bench_lessons' ``reconcile``
does for Adam.

    python bench/bench_find_lr.py [--seeds 0,1,2,3,4] [--trained 40] [--notebook05] [--learns 0.37,0.59,...]
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
from rlnb.sweep.lr.curve import FLAT, rise
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


def notebook05(seed: int, runs: str) -> str:
    """Notebook 05's panel after its 6 steps, then its Find LR: the status line it shows."""
    from rlnb.widgets import OptimizerBuilder, RunPanel

    builder = OptimizerBuilder("muon", total_steps=40)
    builder.sched_kind.value = "cosine"
    builder.warmup.value = 3
    with rlnb.connect("local", optimizer="muon", seed=seed, device="cpu", record=False, threads=1) as session:
        panel = RunPanel(session, builder, n_steps=40)
        panel.step_button.click()
        assert panel.join(3600) and panel.error is None, panel.error
        panel.n.value = 5
        panel.run_button.click()
        assert panel.join(3600) and panel.error is None, panel.error
        builder.lr_finder.options = {"threads": 1, "runs_dir": runs}
        found = builder.lr_finder.run()
        panel.close()
        adam = "-" if found.params is None else f"{found.params.adam.learning_rate:.2g}"
        return f"step {session.step} suggestion {found.suggestion} AdamW {adam}; {builder.lr_finder.status.value}"


def learns(seed: int, rate: float) -> str:
    """``LESSON_STEPS`` steps at the default preset's Muon config scaled to ``rate``: learns by its lesson?"""
    from rlnb.tasks import first_letter_task
    from rlnb.tasks.lesson import train
    from rlnb.widgets.presets import DEFAULT_PRESET, LESSON_STEPS, LESSONS, PRESETS

    given = PRESETS[DEFAULT_PRESET]
    params = rlnb.MuonParams.from_dict({**given["muon"], "adam": given["muon.adam"]})
    params = params.scaled(rate / params.learning_rate)
    task = first_letter_task()
    with rlnb.connect("local", optimizer="muon", seed=seed, device="cpu", record=False, threads=1) as session:
        run = train(session, task, params, LESSON_STEPS, seed=seed)
    verdict = "learns" if LESSONS[DEFAULT_PRESET].holds(run, task.chance) else "does not learn"
    return (
        f"Muon {params.learning_rate:.2g} (AdamW {params.adam.learning_rate:.2g}): {verdict}; accuracy "
        f"{run.final_accuracy:.3g}, reward {run.final_reward:.3g}, distinct {run.distinct:.3g}, "
        f"failed {run.failed or 0}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--trained", type=int, default=40)
    parser.add_argument("--notebook05", action="store_true")
    parser.add_argument("--learns", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("command: python bench/bench_find_lr.py " + " ".join(sys.argv[1:]))
    if args.learns:
        rates = [float(r) for r in args.learns.split(",")]
        for seed, rate in zip((int(s) for s in args.seeds.split(",")), rates, strict=True):
            for scale, label in ((1.0, "the suggestion"), (0.1, "a tenth of it")):
                print(f"seed {seed}, {label}: {learns(seed, rate * scale)}", flush=True)
        return
    if args.notebook05:
        for seed in (int(s) for s in args.seeds.split(",")):
            print(f"notebook 05 seed {seed}: {notebook05(seed, tempfile.mkdtemp(prefix='bench-find-lr-'))}", flush=True)
        return
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
