"""The figures the docs quote that bench_lessons.py did not make, on seeds 0-9 (review39a F4).

    python bench/bench_lessons_more.py [--seeds 0-9] [--only partial,ce-rates,digits-rates,edge,step0,default]
        [--json runs.jsonl]

* partial: docs/tasks.md and ``first_letter_task``'s docstring: with 0.1 for any letter (partial credit) against
  exact match, ``first_letter``, Adam 2e-3 (weight decay 0), 40 steps, the held-out accuracy every 5 steps: at
  step 20 and the step it first reaches 0.8.
* ce-rates: notebook 02's "each optimizer's best on this corpus": ``bench_lessons.ce_run`` at Adam 3e-4, 1e-3,
  3e-3, 1e-2 (Muon's AdamW part at 1e-3) and Muon 0.01, 0.02, 0.05; the best held-out loss over its steps.
* digits-rates: docs/sweeps.md's digits rates (reward 0.99 or more at 0.07-0.2; "barely moves" at 1e-3 and 2e-3; a
  collapse to 0 more often the larger the rate): ``rlnb.sweep.sweep`` of Adam (weight decay 0) on the digits task,
  10-step trials, the trial's final reward (mean of the last 5 steps) per rate; how many seeds reach 0.99, end at 0.
* edge: bench_lessons.py's ``reconcile`` without its Optuna searches (~20 CPU-min): Find LR's suggestion on the
  first-letter task, then 40 steps held constant at it and at a tenth of it, judged by the default preset's lesson
  (what Find LR's status line quotes, ``rlnb.widgets.suggestion.EDGE``). The same functions and record keys as
  bench_lessons.py, so its ``--only reconcile --resume`` on the same ``--json`` reuses every run.
* step0: docs/tasks.md and ``digits_task``'s docstring: what a step sees at the start, step 0 of first_letter (its
  rewarded samples) and of digits (its mean reward), sampled as ``lesson.train`` samples its first step.
* default: the default preset's lesson for Adam (bench_lessons.py's ``presets`` part, its runs and record keys) on
  ``--seeds``: the README and docs/tasks.md quote its hit rate past seeds 0-9 (run it with ``--seeds 10-19``).

One torch thread per session (``bench_lessons.THREADS``). Times are CPU seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import tempfile
from typing import Any

from bench_lessons import (  # the same runs, the same records
    CE,
    THREADS,
    Runs,
    as_run,
    ce_run,
    constant_run,
    lrfind_run,
    preset_params,
    preset_run,
    seeds_arg,
    span,
)

import rlnb
from rlnb.tasks import digits_task, first_letter_task
from rlnb.tasks.lesson import train
from rlnb.tasks.rl import SEED_STRIDE, rl_step
from rlnb.widgets.presets import DEFAULT_PRESET, LESSONS

PARTIAL: dict[str, Any] = {"lr": 2e-3, "steps": 40, "every": 5, "credit": 0.1, "learned": 0.8}
CE_RATES: dict[str, list[float]] = {"adam": [3e-4, 1e-3, 3e-3, 1e-2], "muon": [0.01, 0.02, 0.05]}
DIGITS_RATES: dict[str, Any] = {
    "rates": [1e-3, 2e-3, 0.04, 0.05, 0.07, 0.1, 0.2, 0.3, 0.5, 1.0],
    "steps": 10,
    "reached": 0.99,
}


def partial_run(partial: bool, seed: int) -> dict[str, Any]:
    """40 steps of first_letter, exact match or 0.1 for any other letter of the alphabet."""
    task = first_letter_task()
    if partial:  # first_letter_task's alphabet, "abcd"

        def reward(prompt: str, completion: str) -> float:
            return (
                1.0 if completion == prompt[0] else PARTIAL["credit"] * (len(completion) == 1 and completion in "abcd")
            )

        task = dataclasses.replace(task, reward=reward)
    params = rlnb.AdamParams(learning_rate=PARTIAL["lr"], weight_decay=0.0)
    with rlnb.connect("local", optimizer="adam", seed=seed, device="cpu", record=False, threads=THREADS) as s:
        run = train(s, task, params, PARTIAL["steps"], eval_every=PARTIAL["every"], seed=seed)
    return {"accuracy": {str(k): v for k, v in run.accuracy.items()}}


def first_reached(accuracy: dict[str, float]) -> int | None:
    """The first step whose held-out accuracy is at least ``PARTIAL["learned"]``, or None."""
    steps = sorted(int(k) for k in accuracy)
    return next((k for k in steps if accuracy[str(k)] >= PARTIAL["learned"]), None)


def ce_rate_run(kind: str, lr: float, seed: int) -> dict[str, Any]:
    """Notebook 02's run (``ce_run``) with ``kind``'s own rate set to ``lr``."""
    saved = CE[kind]
    CE[kind] = {**saved, "learning_rate": lr}
    try:
        return ce_run(kind, seed)
    finally:
        CE[kind] = saved


def digits_runs(seeds: list[int]) -> list[dict[str, Any]]:
    from rlnb.sweep import grid, sweep

    with tempfile.TemporaryDirectory() as tmp:
        space, steps = grid(learning_rate=DIGITS_RATES["rates"]), DIGITS_RATES["steps"]
        trials = sweep(rlnb.AdamParams(weight_decay=0.0), space, seeds=seeds, steps=steps, task=digits_task(),
                       runs_dir=tmp, progress=False, threads=THREADS)  # fmt: skip
        return [{"lr": float(r.learning_rate), "seed": int(r.seed), "status": r.status,
                 "reward": float(r.final_reward)} for _, r in trials.iterrows()]  # fmt: skip


def edge(runs: Runs, seeds: list[int]) -> None:
    """Per seed, Find LR's suggestion (``lrfind/SEED``), 40 constant steps at it and a tenth (``constant/LR/SEED``)."""
    found = [runs.get(f"lrfind/{sd}", functools.partial(lrfind_run, sd)) for sd in seeds]
    learns, chance = LESSONS[DEFAULT_PRESET].holds, first_letter_task().chance
    print(f"info   [edge] Find LR suggestions: {', '.join(format(f['suggestion'], '.2g') for f in found)}", flush=True)
    for label, scale in (("Find LR's suggestion", 1.0), ("a tenth of it", 0.1)):
        rates = [float(f"{f['suggestion'] * scale:.2g}") for f in found]
        rs = [as_run(runs.get(f"constant/{lr:.2g}/{sd}", functools.partial(constant_run, lr, sd)))
              for lr, sd in zip(rates, seeds, strict=True)]  # fmt: skip
        hits = [sd for sd, r in zip(seeds, rs, strict=True) if learns(r, chance)]
        print(
            f"info   [edge] 40 steps at {label} (constant): learns on {len(hits)}/{len(rs)} (seeds {hits}); accuracy "
            f"{span([r.final_accuracy for r in rs])}; reward {span([r.final_reward for r in rs])}; distinct "
            f"{span([r.distinct for r in rs])}",
            flush=True,
        )


def step0_run(name: str, seed: int) -> dict[str, Any]:
    """Step 0 of the task ``name`` on a fresh session of ``seed``, sampled as ``lesson.train``'s first step (the
    default preset's Adam; the update comes after the samples): its mean reward and how many samples it scored."""
    task = first_letter_task() if name == "first_letter" else digits_task()
    with rlnb.connect("local", optimizer="adam", seed=seed, device="cpu", record=False, threads=THREADS) as s:
        report = rl_step(s, task, preset_params(DEFAULT_PRESET, "adam"), seed=seed * SEED_STRIDE)
    return {"reward": report.reward, "samples": len(task.prompts) * task.group_size}


def step0(runs: Runs, seeds: list[int]) -> None:
    for name in ("first_letter", "digits"):
        rs = [runs.get(f"step0/{name}/{sd}", functools.partial(step0_run, name, sd)) for sd in seeds]
        rewarded = [round(r["reward"] * r["samples"], 6) for r in rs]
        said = f"rewarded samples of {rs[0]['samples']} {span(rewarded)}: {rewarded}" if name == "first_letter" else ""
        print(f"info   [step0] {name}: reward at step 0 {span([r['reward'] for r in rs])}; {said}", flush=True)


def default_preset(runs: Runs, seeds: list[int]) -> None:
    lesson, chance = LESSONS[DEFAULT_PRESET], first_letter_task().chance
    run = functools.partial(preset_run, DEFAULT_PRESET, "adam")
    rs = [as_run(runs.get(f"preset/{DEFAULT_PRESET}/adam/{sd}", functools.partial(run, sd))) for sd in seeds]
    misses = [f"seed {sd}: accuracy {r.accuracy}, reward {r.final_reward:.3g}"
              for sd, r in zip(seeds, rs, strict=True) if not lesson.holds(r, chance)]  # fmt: skip
    print(f"info   [default] {DEFAULT_PRESET} / adam on seeds {seeds}: holds on {len(rs) - len(misses)}/{len(rs)}; "
          f"accuracy@40 {span([r.final_accuracy for r in rs])}; reward (last 5) {span([r.final_reward for r in rs])}"
          f"; misses: {misses or 'none'}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-9", type=seeds_arg, help="e.g. 0-9 or 0,3,5-7")
    ap.add_argument("--only", default="partial,ce-rates,digits-rates,edge")
    ap.add_argument("--json", default=None, help="keep every run's record here (JSON lines)")
    ap.add_argument("--resume", action="store_true", help="reuse the records already in --json")
    args = ap.parse_args()
    only, seeds, runs = set(args.only.split(",")), args.seeds, Runs(args.json, args.resume)
    print(f"every session at threads={THREADS}; seeds {seeds}", flush=True)
    if "partial" in only:
        for label, partial in (("exact match", False), (f"{PARTIAL['credit']} for any letter", True)):
            rs = [runs.get(f"partial/{partial}/{sd}", functools.partial(partial_run, partial, sd)) for sd in seeds]
            at20 = [r["accuracy"]["20"] for r in rs]
            reached = [first_reached(r["accuracy"]) for r in rs]
            steps = [s for s in reached if s is not None]
            print(
                f"info   [partial] {label}: held-out accuracy at step 20 {span(at20)} (above chance 0.25 on "
                f"{sum(a > 0.25 for a in at20)}/{len(rs)}); reaches {PARTIAL['learned']} by step 40 on "
                f"{len(steps)}/{len(rs)}, at step {span([float(s) for s in steps]) if steps else '-'} (median "
                f"{statistics.median(steps) if steps else '-'})",
                flush=True,
            )
    if "ce-rates" in only:
        for kind, rates in CE_RATES.items():
            for lr in rates:
                run = functools.partial(ce_rate_run, kind, lr)
                rs = [runs.get(f"ce-rate/{kind}/{lr:g}/{sd}", functools.partial(run, sd)) for sd in seeds]
                best = [min(c[2] for c in r["curve"]) for r in rs]
                print(
                    f"info   [notebook 02] {kind} lr {lr:g}: best held-out loss {span(best)}"
                    f"; at step {CE['steps']} training {span([r['train'] for r in rs])}, held-out "
                    f"{span([r['heldout'] for r in rs])}",
                    flush=True,
                )
    if "digits-rates" in only:
        rows = runs.get(f"digits-rates/{DIGITS_RATES['rates']}/{seeds}", functools.partial(digits_runs, seeds))
        for lr in DIGITS_RATES["rates"]:
            rs = [r for r in rows if r["lr"] == lr]
            print(
                f"info   [sweeps.md] digits, Adam lr {lr:g}, {DIGITS_RATES['steps']} steps: reward (last 5) "
                f"{span([r['reward'] for r in rs])}; >= {DIGITS_RATES['reached']} on "
                f"{sum(r['reward'] >= DIGITS_RATES['reached'] for r in rs)}/{len(rs)}; 0 on "
                f"{sum(r['reward'] == 0 for r in rs)}/{len(rs)}; not completed "
                f"{sum(r['status'] != 'COMPLETED' for r in rs)}",
                flush=True,
            )

    if "edge" in only:
        edge(runs, seeds)
    if "step0" in only:
        step0(runs, seeds)
    if "default" in only:
        default_preset(runs, seeds)


if __name__ == "__main__":
    main()
