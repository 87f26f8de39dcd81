"""The lesson of docs/sweeps.md: an Optuna search with pruning against one without, on the same budget of RL steps.

Both search Adam's learning rate in [1e-5, 1] (log) with TPE for trials of 10 RL steps (tiny model,
digits task, seed 0, one trial at a time, one torch thread), and stop asking for trials once the steps
spent reach ``--budget``. Without a pruner every trial costs 10 steps; with the median pruner, bad trials
stop early and the budget buys more trials. Each search's best learning rate is then checked on 3 fresh
seeds. One search seed (TPE's) is one draw of the lesson, so the pair runs for each of ``--search-seeds``
and the summary counts on how many each claim holds. Writes a figure: the objective against the learning
rate for each search of the first search seed (pruned trials at the value they had when stopped), and where
the searches spent their steps, by decade of learning rate, summed over the search seeds.

    python bench/bench_sweep_optuna.py [--budget 150] [--search-seeds 0 1 2] [--figure docs/assets/optuna-pruning.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

import rlnb
from rlnb.sweep import search_plot, sweep

BASE = rlnb.AdamParams(weight_decay=0.0)
SPACE = {"learning_rate": (1e-5, 1.0, "log")}
STEPS = 10
CHECK_SEEDS = (1, 2, 3)
GOOD = 0.9  # a reward this high (mean of the last 5 of 10 steps) is the good region's


def search(pruner: str | None, budget: int, runs_dir: str, seed: int) -> tuple[pd.DataFrame, float]:
    stop = threading.Event()
    spent = [0]

    def progress(done: int, total: int, row: dict) -> None:
        spent[0] += int(row["steps_done"])
        if spent[0] >= budget:
            stop.set()

    start = time.perf_counter()
    trials = sweep(
        BASE, space=SPACE, n_trials=budget, search="optuna", sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=pruner, steps=STEPS, max_concurrent=1, stop=stop, progress=progress, runs_dir=runs_dir, threads=1,
    )  # fmt: skip
    return trials, time.perf_counter() - start


def check(lr: float, runs_dir: str) -> float:
    """The found learning rate on seeds the search never saw: mean final reward."""
    trials = sweep(BASE, [{"learning_rate": lr}], seeds=CHECK_SEEDS, steps=STEPS, max_concurrent=2,
                   runs_dir=runs_dir, progress=False, threads=1)  # fmt: skip
    return float(trials.final_reward.mean())


def decade_steps(trials: pd.DataFrame) -> list[int]:
    """RL steps spent per decade of learning rate, [1e-5, 1e-4) ... [0.1, 1]."""
    decade = np.floor(np.log10(trials.learning_rate.to_numpy(dtype=float))).clip(-5, -1)
    return [int(trials.steps_done[decade == d].sum()) for d in range(-5, 0)]


def steps_to_good(trials: pd.DataFrame) -> int | None:
    """RL steps spent, in trial order, until the first trial that finished with a reward >= GOOD (None: none did)."""
    spent = trials.steps_done.cumsum()
    good = (trials.status == "COMPLETED") & (trials.value >= GOOD)
    return int(spent[good].iloc[0]) if good.any() else None


def budget_plot(spent: dict[str, list[int]], ax: Axes, n: int) -> None:
    """RL steps spent per decade of learning rate, one bar per search, over n search seeds: where the budget went."""
    edges = np.arange(-5, 1)
    width = 0.8 / len(spent)
    for i, (name, steps) in enumerate(spent.items()):
        ax.bar(edges[:-1] + 0.1 + i * width, steps, width=width, align="edge", color=f"C{i}", label=name)
    ax.set_xticks(edges, [f"1e{e}" for e in edges])
    ax.set(xlabel="learning rate (decade)", ylabel=f"RL steps spent, {n} search seeds", title="where the budget went")
    ax.legend(loc="best", fontsize="small")


def one_seed(budget: int, seed: int, tmp: str) -> dict[str, tuple[pd.DataFrame, dict]]:
    """Both searches with TPE seed ``seed``: each one's trials and its figures (printed as they come)."""
    print(f"  search seed {seed}")
    out: dict[str, tuple[pd.DataFrame, dict]] = {}
    for name, pruner in (("no pruning", None), ("median pruning", "median")):
        trials, wall = search(pruner, budget, tmp, seed)
        done = trials[trials.status == "COMPLETED"]
        best = done.loc[done.value.idxmax()]
        fresh = check(float(best.learning_rate), tmp)
        row: dict[str, Any] = {"trials": len(trials), "pruned": int((trials.status == "PRUNED").sum()),
               "steps": int(trials.steps_done.sum()), "best_lr": float(best.learning_rate), "best": float(best.value),
               "fresh": fresh, "decades": decade_steps(trials), "to_good": steps_to_good(trials)}  # fmt: skip
        out[name] = (trials, row)
        print(f"    {name:15s} {row['trials']:2d} trials ({row['pruned']} pruned), {row['steps']} steps, "
              f"{wall:5.1f} s; best learning rate {row['best_lr']:.3g} (reward {row['best']:.3f}); "
              f"on seeds {CHECK_SEEDS}: {fresh:.3f}; steps until a reward >= {GOOD}: {row['to_good']}")  # fmt: skip
        spent = ", ".join(f"1e{d}: {n}" for d, n in zip(range(-5, 0), row["decades"], strict=True))
        print(f"      steps by decade of learning rate: {spent}", flush=True)
        for _, t in trials.sort_values("learning_rate").iterrows():
            print(f"      lr {t.learning_rate:9.3g}  {t.status:9s} {int(t.steps_done):2d} steps  reward {t.value:.3f}")
    return out


def summary(rows: dict[str, list[dict]]) -> None:
    """On how many search seeds each claim of the lesson holds."""
    n = len(rows["no pruning"])
    print(f"  summary over {n} search seeds")
    for name, rs in rows.items():
        good = [r["to_good"] for r in rs if r["to_good"] is not None]
        dense = [r["decades"][3] for r in rs]
        fresh = [round(r["fresh"], 3) for r in rs]
        print(f"    {name:15s} trials {np.mean([r['trials'] for r in rs]):.1f} (pruned "
              f"{np.mean([r['pruned'] for r in rs]):.1f}); steps in [0.01, 0.1) {np.mean(dense):.1f} "
              f"({min(dense)}-{max(dense)}); best rates {sorted(round(r['best_lr'], 3) for r in rs)}; on seeds "
              f"{CHECK_SEEDS} >= {GOOD} on {sum(f >= GOOD for f in fresh)}/{n}, 1.000 on {fresh.count(1.0)}/{n} "
              f"{fresh}; a reward >= {GOOD} reached on {len(good)}/{n}, after {good} steps")  # fmt: skip
    pairs = list(zip(rows["no pruning"], rows["median pruning"], strict=True))
    denser = sum(p["decades"][3] > q["decades"][3] for q, p in pairs)
    sooner = sum(p["to_good"] is not None and (q["to_good"] is None or p["to_good"] < q["to_good"]) for q, p in pairs)
    print(f"    pruning spent more steps in [0.01, 0.1) on {denser}/{n} search seeds, reached a reward >= {GOOD} "
          f"in fewer steps on {sooner}/{n}")  # fmt: skip


def optuna_part(budget: int, seeds: list[int], figure: str) -> None:
    print(f"optuna lesson: Adam learning rate in [1e-5, 1] (log), TPE, {STEPS}-step trials, budget {budget} RL steps, "
          f"threads=1, search seeds {seeds}")  # fmt: skip
    rows: dict[str, list[dict]] = {"no pruning": [], "median pruning": []}
    first: dict[str, pd.DataFrame] = {}
    with tempfile.TemporaryDirectory(prefix="rlnb-bench-") as tmp:
        for seed in seeds:
            for name, (trials, row) in one_seed(budget, seed, tmp).items():
                rows[name].append(row)
                first.setdefault(name, trials)
    summary(rows)
    fig = Figure(figsize=(13, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (name, trials) in zip(axes, first.items(), strict=False):
        title = f"{name}, search seed {seeds[0]}: {len(trials)} trials, {int(trials.steps_done.sum())} steps"
        search_plot(trials, ax=ax).set_title(title, fontsize="medium")
        ax.set_ylabel("reward (mean of the last 5 steps)")
    summed = {name: list(np.sum([r["decades"] for r in rs], axis=0)) for name, rs in rows.items()}
    budget_plot(summed, axes[2], len(seeds))
    Path(figure).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    print(f"    figure: {figure}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--search-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--figure", default="docs/assets/optuna-pruning.png")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    optuna_part(args.budget, args.search_seeds, args.figure)
