"""Check every lesson rlnb teaches on seeds 0-9 and print each claim's hit rate; a lesson ships at >= 9/10.

    python bench/bench_lessons.py [--seeds 0-9] [--only presets,ce,sweep,lrfind] [--json runs.jsonl --resume]

* presets: every preset x {adam, muon}, judged by its own claim (``rlnb.widgets.presets.LESSONS``) on
  ``rlnb.tasks.lesson.train`` of the first-letter task, as the panel runs it.
* ce: notebook 02, next-token cross-entropy on ``rlnb.tasks.corpus`` with the built-in ``small`` model, Adam
  against Muon at equal steps and the same batches.
* sweep: notebook 03's sweep (``rlnb.sweep.sweep`` as the notebook calls it, batched), too small / right /
  too large judged on each trial's history.
* lrfind: ``rlnb.sweep.lr_find`` on the first-letter task (notebook 03's range test).
* tasks: ``rlnb demo --task NAME``'s run on every built-in task (the README's table).
* reconcile: notebook 03's Optuna search per seed, and 40 steps at a constant rate of Find LR's suggestion,
  Optuna's best and a tenth of the suggestion: do they learn?

Every session runs torch on ``THREADS`` thread(s), fixed (``rlnb.connect(..., threads=THREADS)``, a sweep's and
Find LR's sessions too), and the bench prints it first: a seeded run's figures depend on the count (Muon's bf16
Newton-Schulz: the demo's step-10 accuracy 0.61 on one thread, 0.78 on two), and the engine's thread policy picks
it from the machine's load unless it is fixed (``torch.set_num_threads`` alone did not: each session's policy
set its own). Times are CPU seconds per run, which is what an unloaded core takes.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

THREADS = 1
"""The intra-op thread count every session of the bench runs at (the policy's choice for one busy worker on a
loaded two-core machine), fixed so that two runs of the bench measure the same thing."""
torch.set_num_threads(THREADS)  # the process's own torch work (the corpus's tensors), outside the sessions

import rlnb  # noqa: E402
from rlnb.tasks import corpus, first_letter_task  # noqa: E402
from rlnb.tasks.lesson import LessonRun, train  # noqa: E402
from rlnb.widgets.presets import DEFAULT_PRESET, LESSON_STEPS, LESSONS, PRESETS  # noqa: E402
from rlnb.wire.status import short_name  # noqa: E402

CE = {
    "model": "small",
    "batch": 16,
    "window": 64,
    "steps": 150,
    "every": 25,
    "adam": {"learning_rate": 1e-3, "weight_decay": 0.0, "grad_clip_norm": 0.0},
    "muon": {
        "learning_rate": 0.02,
        "grad_clip_norm": 0.0,
        "adam": {"learning_rate": 1e-3, "weight_decay": 0.0, "grad_clip_norm": 0.0},
    },
}
"""Notebook 02's run: Adam 1e-3 (of 3e-4..1e-2 the lowest loss) and Muon 0.02 with that AdamW (the lowest training
loss; bench_lessons_more.py --only ce-rates)."""
CE_GAP = 0.5
"""Muon's training loss must be at least this far (nats/token) below Adam's after ``CE["steps"]`` steps."""
SWEEP = {"rates": [1e-5, 2e-3, 1.0], "steps": LESSON_STEPS}
"""Notebook 03's sweep: too small, right, too large (AdamW, weight decay 0, clip 1)."""


def params(kind: str, values: dict[str, Any]) -> rlnb.AdamParams | rlnb.MuonParams:
    return (rlnb.AdamParams if kind == "adam" else rlnb.MuonParams).from_dict(values)


def preset_params(name: str, kind: str) -> rlnb.AdamParams | rlnb.MuonParams:
    p = PRESETS[name]
    return params(kind, p["adam"] if kind == "adam" else {**p["muon"], "adam": p["muon.adam"]})


def preset_run(name: str, kind: str, seed: int) -> dict[str, Any]:
    task = first_letter_task()
    with rlnb.connect("local", optimizer=kind, seed=seed, device="cpu", record=False, threads=THREADS) as s:
        run = train(s, task, preset_params(name, kind), LESSON_STEPS, seed=seed)
    return {"accuracy": run.accuracy, "rewards": run.rewards, "distinct": run.distinct, "failed": run.failed}


def as_run(r: dict[str, Any]) -> LessonRun:
    return LessonRun({int(k): v for k, v in r["accuracy"].items()}, r["rewards"], r["distinct"], r["failed"])


def ce_run(kind: str, seed: int) -> dict[str, Any]:
    """Notebook 02's run: ``steps`` optim-steps on random windows of the training text (the order fixed by
    ``seed``), the loss on fixed covers of the training and held-out text every ``every`` steps."""
    rng = random.Random(seed)
    train_eval = corpus.cross_entropy(corpus.tiles(corpus.TRAIN_TEXT[:4000], CE["window"]))
    held_eval = corpus.cross_entropy(corpus.tiles(corpus.HELDOUT_TEXT, CE["window"]))
    p, curve = params(kind, CE[kind]), []
    with rlnb.connect(
        "local", optimizer=kind, model=CE["model"], seed=seed, device="cpu", record=False, threads=THREADS
    ) as s:
        for i in range(CE["steps"]):
            s.forward_backward(corpus.cross_entropy(corpus.batch(corpus.TRAIN_TEXT, CE["batch"], CE["window"], rng)))
            s.optim_step(p)
            if (i + 1) % CE["every"] == 0:
                curve.append(
                    (
                        i + 1,
                        s.forward_backward(train_eval, forward_only=True).result().loss,
                        s.forward_backward(held_eval, forward_only=True).result().loss,
                    )
                )
    return {"curve": curve, "train": curve[-1][1], "heldout": curve[-1][2]}


def sweep_runs(seeds: list[int]) -> list[dict[str, Any]]:
    """Notebook 03's sweep on all seeds at once; per trial its final reward and last step's distinct count."""
    from rlnb.sweep import grid, sweep

    with tempfile.TemporaryDirectory() as tmp:
        trials = sweep(
            rlnb.AdamParams(weight_decay=0.0),
            grid(learning_rate=SWEEP["rates"]),
            seeds=seeds,
            steps=SWEEP["steps"],
            task=first_letter_task(),
            runs_dir=tmp,
            progress=False,
            threads=THREADS,
        )
        return sweep_rows(trials)


def sweep_rows(trials: Any) -> list[dict[str, Any]]:
    """Each trial's row with the distinct count of its run's last step, each run found by the trial and seed it
    records: a trial without a run (stopped before it started, or failed before its session opened) is kept,
    distinct NaN. Zipped with ``histories(trials)``, which leaves those out, ``strict=True`` raised after a stop."""
    from rlnb.sweep import histories

    runs = {(h.config.get("trial"), h.config.get("seed")): h for h in histories(trials)}
    out = []
    for _, row in trials.iterrows():
        h = runs.get((int(row.trial), int(row.seed)))
        logged = h.logged.dropna(subset=["reward"]) if h is not None else None
        distinct = float(logged["completions/distinct_mean"].iloc[-1]) if logged is not None and len(logged) else None
        out.append(
            {
                "lr": float(row.learning_rate),
                "seed": int(row.seed),
                "status": row.status,
                "final_reward": float(row.final_reward),
                "distinct": math.nan if distinct is None else distinct,
                "executor": row.executor,
            }
        )
    return out


def constant_run(lr: float, seed: int) -> dict[str, Any]:
    """``train`` at a constant AdamW rate (weight decay 0, clip 1), as ``preset_run``."""
    task = first_letter_task()
    with rlnb.connect("local", optimizer="adam", seed=seed, device="cpu", record=False, threads=THREADS) as s:
        run = train(s, task, rlnb.AdamParams(learning_rate=lr, weight_decay=0.0), LESSON_STEPS, seed=seed)
    return {"accuracy": run.accuracy, "rewards": run.rewards, "distinct": run.distinct, "failed": run.failed}


def task_run(name: str, seed: int) -> dict[str, Any]:
    """The demo's run (``rlnb demo --task NAME``, Adam, ``LESSON_STEPS`` steps): its last rewards and, for a
    verifiable task, held-out and training accuracy at the end."""
    from rlnb.cli.demo.options import DEMO_PARAMS
    from rlnb.tasks import TASKS, VerifiedTask

    task = TASKS[name]()
    with rlnb.connect("local", optimizer="adam", seed=seed, device="cpu", record=False, threads=THREADS) as s:
        if isinstance(task, VerifiedTask):
            run = train(s, task, params("adam", DEMO_PARAMS["adam"]), LESSON_STEPS, seed=seed)
            return {"reward": run.final_reward, "eval": run.final_accuracy, "train": task.evaluate(s, split="train")}
        from rlnb.tasks import rl_step

        rewards = [
            rl_step(s, task, params("adam", DEMO_PARAMS["adam"]), seed=seed * 1_000_003 + i).reward
            for i in range(LESSON_STEPS)
        ]
        return {"reward": statistics.fmean(rewards[-5:])}


def optuna_run(seed: int) -> dict[str, Any]:
    """Notebook 03's Optuna search with the trials' seed ``seed``: the best completed trial's rate."""
    from rlnb.sweep import sweep

    with tempfile.TemporaryDirectory() as tmp:
        found = sweep(
            rlnb.AdamParams(weight_decay=0.0),
            space={"learning_rate": (1e-5, 1.0, "log")},
            n_trials=8,
            search="optuna",
            pruner="median",
            steps=10,
            seeds=[seed],
            task=first_letter_task(),
            runs_dir=tmp,
            progress=False,
            threads=THREADS,
        )
        done = found[found.status == "COMPLETED"].sort_values("final_reward")
        return {"best": float(done.learning_rate.iloc[-1]), "reward": float(done.final_reward.iloc[-1])}


def lrfind_run(seed: int) -> dict[str, Any]:
    from rlnb.sweep import lr_find

    with tempfile.TemporaryDirectory() as tmp:
        found = lr_find(
            rlnb.AdamParams(weight_decay=0.0),
            task=first_letter_task(),
            steps=30,
            seed=seed,
            runs_dir=tmp,
            device="cpu",
            threads=THREADS,
        )
    if found.interrupted:  # lr_find keeps a Ctrl-C's result and goes on: stop the bench, and record no cut run
        raise KeyboardInterrupt
    return {"suggestion": found.suggestion, "reason": found.reason}


class Runs:
    """Run records by key in a JSON-lines file; ``--resume`` reuses those already there."""

    def __init__(self, path: str | None, resume: bool) -> None:
        self.done: dict[str, dict[str, Any]] = {}
        if path and resume and Path(path).exists():
            for line in Path(path).read_text().splitlines():
                r = json.loads(line)
                self.done[r["key"]] = r
        self.log = open(path, "a") if path else None  # noqa: SIM115

    def get(self, key: str, run: Callable[[], Any]) -> Any:
        if key not in self.done:
            c0 = time.process_time()
            r = {"key": key, "value": run(), "cpu": time.process_time() - c0}
            self.done[key] = json.loads(json.dumps(r, default=str))
            if self.log:
                self.log.write(json.dumps(self.done[key]) + "\n")
                self.log.flush()
            print(f"  {key}: {time.process_time() - c0:.1f} s CPU", file=sys.stderr, flush=True)
        return self.done[key]["value"]


def failures(rs: list[LessonRun]) -> str:
    """How many runs failed, by code (``NON_FINITE_LOSS 3``): only a non-finite loss is a collapse."""
    codes = collections.Counter(short_name(r.failed) for r in rs if r.failed)
    return ", ".join(f"{code} {n}" for code, n in sorted(codes.items())) or "0"


def verdict(hits: int, n: int) -> str:
    return f"{hits}/{n} " + ("ships" if hits >= math.ceil(0.9 * n) else "FAILS")


def span(xs: list[float]) -> str:
    xs = [x for x in xs if x == x]
    return f"{statistics.fmean(xs):.3g} ({min(xs):.3g}-{max(xs):.3g})" if xs else "-"


def seeds_arg(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-9", type=seeds_arg, help="e.g. 0-9 or 0,3,5-7")
    ap.add_argument("--only", default="presets,ce,sweep,lrfind,reconcile,tasks")
    ap.add_argument("--json", default=None, help="keep every run's record here (JSON lines)")
    ap.add_argument("--resume", action="store_true", help="reuse the records already in --json")
    args = ap.parse_args()
    only, seeds, runs = set(args.only.split(",")), args.seeds, Runs(args.json, args.resume)
    chance = first_letter_task().chance
    print(f"every session at threads={THREADS} (fixed; torch {torch.__version__})", flush=True)
    start = time.perf_counter()
    if "presets" in only:
        for name, lesson in LESSONS.items():
            for kind in ("adam", "muon"):
                rs = [
                    as_run(runs.get(f"preset/{name}/{kind}/{sd}", functools.partial(preset_run, name, kind, sd)))
                    for sd in seeds
                ]
                print(
                    f"{verdict(sum(lesson.holds(r, chance) for r in rs), len(rs))}  [{name} / {kind}] "
                    f"{lesson.text(kind)}\n      accuracy@{LESSON_STEPS} {span([r.final_accuracy for r in rs])}; "
                    f"reward (last 5) {span([r.final_reward for r in rs])}; distinct "
                    f"{span([r.distinct for r in rs])}; failed {failures(rs)}",
                    flush=True,
                )
    if "ce" in only:
        res = {
            k: [runs.get(f"ce/{k}/{sd}", functools.partial(ce_run, k, sd)) for sd in seeds] for k in ("adam", "muon")
        }
        gaps = [a["train"] - m["train"] for a, m in zip(res["adam"], res["muon"], strict=True)]
        held = [a["heldout"] - m["heldout"] for a, m in zip(res["adam"], res["muon"], strict=True)]
        print(
            f"{verdict(sum(g >= CE_GAP for g in gaps), len(gaps))}  [notebook 02] after {CE['steps']} steps "
            f"Muon's training loss is >= {CE_GAP} nats/token below Adam's\n      Adam "
            f"{span([r['train'] for r in res['adam']])}, Muon {span([r['train'] for r in res['muon']])}, "
            f"gap {span(gaps)}",
            flush=True,
        )
        for i, (step, _, _) in enumerate(res["adam"][0]["curve"]):
            a = [r["curve"][i] for r in res["adam"]]
            m = [r["curve"][i] for r in res["muon"]]
            print(
                f"      step {step:>3}: train Adam {span([x[1] for x in a])} Muon {span([x[1] for x in m])}; "
                f"held-out Adam {span([x[2] for x in a])} Muon {span([x[2] for x in m])}"
            )
        print(
            f"info   [notebook 02] held-out loss after {CE['steps']} steps, Adam minus Muon: {span(held)} "
            f"(Muon lower on {sum(h > 0 for h in held)}/{len(held)} seeds)",
            flush=True,
        )
        best = {k: [min(c[2] for c in r["curve"]) for r in rs] for k, rs in res.items()}
        at = [min(r["curve"], key=lambda c: c[2])[0] for r in res["muon"]]
        pairs = list(zip(res["adam"], res["muon"], strict=True))
        ahead = {
            step: sum(m["curve"][i][2] < a["curve"][i][2] for a, m in pairs)
            for i, (step, _, _) in enumerate(res["adam"][0]["curve"])
        }
        print(f"info   [notebook 02] seeds on which Muon's held-out loss is below Adam's, by step: {ahead}", flush=True)
        early = sum(all(m["curve"][i][2] < a["curve"][i][2] for i in (0, 1)) for a, m in pairs)
        print(
            f"{verdict(early, len(seeds))}  [notebook 02] at steps 25 and 50 Muon's held-out loss is below Adam's",
            flush=True,
        )
        print(
            f"info   [notebook 02] best held-out loss over the steps measured: Adam {span(best['adam'])}, Muon "
            f"{span(best['muon'])} (Muon's at step {span(at)}); Muon lower on "
            f"{sum(m < a for a, m in zip(best['adam'], best['muon'], strict=True))}/{len(seeds)} seeds",
            flush=True,
        )
        over = [r["heldout"] - b for r, b in zip(res["muon"], best["muon"], strict=True)]
        print(
            f"{verdict(sum(o >= 0.2 for o in over), len(seeds))}  [notebook 02] Muon overfits: its held-out loss "
            f"at step {CE['steps']} is >= 0.2 above its best\n      rise {span(over)}",
            flush=True,
        )
    if "sweep" in only:
        trials = runs.get(f"sweep/{SWEEP['rates']}/{seeds}", functools.partial(sweep_runs, seeds))
        by = {lr: [t for t in trials if t["lr"] == lr] for lr in SWEEP["rates"]}
        small, right, large = SWEEP["rates"]
        checks = {
            small: (
                f"too small: at step {SWEEP['steps']} the training reward (mean of the last 5 steps) is still "
                "below 0.05",
                lambda t: t["final_reward"] < 0.05,
            ),
            right: ("right: the training reward reaches >= 0.4", lambda t: t["final_reward"] >= 0.4),
            large: (
                f"too large: the training reward ends at or below {chance + 0.1:.2f} (a constant letter scores "
                f"{chance:.2f}), or the run fails",
                lambda t: t["status"] != "COMPLETED" or t["final_reward"] <= chance + 0.1,
            ),
        }
        for lr, (text, holds) in checks.items():
            ts = by[lr]
            print(
                f"{verdict(sum(holds(t) for t in ts), len(ts))}  [notebook 03] lr {lr:g} is {text}\n      reward "
                f"{span([t['final_reward'] for t in ts])}; distinct {span([t['distinct'] for t in ts])}; "
                f"executor {sorted({t['executor'] for t in ts})}; collapsed onto one answer per prompt (<= 1.5 "
                f"distinct) on {sum(t['distinct'] <= 1.5 for t in ts)}/{len(ts)}",
                flush=True,
            )
    if "lrfind" in only:
        found = [runs.get(f"lrfind/{sd}", functools.partial(lrfind_run, sd)) for sd in seeds]
        sugg = [f["suggestion"] for f in found if f["suggestion"] is not None]
        print(
            f"info   [notebook 03] Find LR suggestions: {', '.join(f'{x:.2g}' for x in sugg)} "
            f"({len(sugg)}/{len(found)} suggested; geometric mean "
            f"{math.exp(statistics.fmean(math.log(x) for x in sugg)) if sugg else math.nan:.2g})",
            flush=True,
        )
    if "tasks" in only:
        for name in ("addition", "digits"):  # first_letter: the presets above
            rs = [runs.get(f"task/{name}/{sd}", functools.partial(task_run, name, sd)) for sd in seeds]
            print(
                f"info   [README] rlnb demo --task {name} ({LESSON_STEPS} steps, Adam): training reward (last 5) "
                f"{span([r['reward'] for r in rs])}"
                + (
                    f"; held-out accuracy {span([r['eval'] for r in rs])}; "
                    f"training-prompt accuracy {span([r['train'] for r in rs])}"
                    if "eval" in rs[0]
                    else ""
                ),
                flush=True,
            )
    if "reconcile" in only:
        found = [runs.get(f"lrfind/{sd}", functools.partial(lrfind_run, sd)) for sd in seeds]
        best = [runs.get(f"optuna/{sd}", functools.partial(optuna_run, sd)) for sd in seeds]
        print(
            f"info   [notebook 03] Optuna's best rate (8 trials of 10 steps): "
            f"{', '.join(format(b['best'], '.2g') for b in best)}",
            flush=True,
        )
        learns = LESSONS[DEFAULT_PRESET].holds
        for label, rates, claim in (
            ("Find LR's suggestion", [f["suggestion"] for f in found], False),
            ("Optuna's best", [b["best"] for b in best], False),
            ("a tenth of Find LR's suggestion", [f["suggestion"] / 10 for f in found], None),
        ):
            rs = [
                as_run(runs.get(f"constant/{lr:.2g}/{sd}", functools.partial(constant_run, float(f"{lr:.2g}"), sd)))
                for lr, sd in zip(rates, seeds, strict=True)
                if lr is not None
            ]
            hits = sum(learns(r, chance) for r in rs)
            head = (
                f"info   learns on {hits}/{len(rs)}:"
                if claim is None
                else f"{verdict(len(rs) - hits, len(rs))}  does not learn:"
            )
            print(
                f"{head} [notebook 03] {LESSON_STEPS} steps at {label} (constant); learning = "
                f"{LESSONS[DEFAULT_PRESET].claim}\n      accuracy "
                f"{span([r.final_accuracy for r in rs])}; reward {span([r.final_reward for r in rs])}; distinct "
                f"{span([r.distinct for r in rs])}",
                flush=True,
            )
    print(f"bench wall time {time.perf_counter() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
