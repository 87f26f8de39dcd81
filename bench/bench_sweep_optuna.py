"""The lesson of docs/sweeps.md: an Optuna search with pruning against one without, on the same budget of RL steps.

Both search Adam's learning rate in [1e-5, 1] (log) with TPE for trials of 10 RL steps (tiny model,
digits task, seed 0, one trial at a time), and stop asking for trials once the steps spent reach
``--budget``. Without a pruner every trial costs 10 steps; with the median pruner, bad trials stop
early and the budget buys more trials. Each search's best learning rate is then checked on 3 fresh
seeds. Writes a figure: the objective against the learning rate for each search (pruned trials at the
value they had when stopped), and where each search spent its steps, by decade of learning rate.

    python bench/bench_sweep_optuna.py [--budget 150] [--figure docs/assets/optuna-pruning.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

import rlnb
from rlnb.sweep import search_plot, sweep

BASE = rlnb.AdamParams(weight_decay=0.0)
SPACE = {"learning_rate": (1e-5, 1.0, "log")}
STEPS = 10
CHECK_SEEDS = (1, 2, 3)


def search(pruner: str | None, budget: int, runs_dir: str) -> tuple[pd.DataFrame, float]:
    stop = threading.Event()
    spent = [0]

    def progress(done: int, total: int, row: dict) -> None:
        spent[0] += int(row["steps_done"])
        if spent[0] >= budget:
            stop.set()

    start = time.perf_counter()
    trials = sweep(
        BASE, space=SPACE, n_trials=budget, search="optuna", sampler="tpe", pruner=pruner, steps=STEPS,
        max_concurrent=1, stop=stop, progress=progress, runs_dir=runs_dir,
    )  # fmt: skip
    return trials, time.perf_counter() - start


def check(lr: float, runs_dir: str) -> float:
    """The found learning rate on seeds the search never saw: mean final reward."""
    trials = sweep(BASE, [{"learning_rate": lr}], seeds=CHECK_SEEDS, steps=STEPS, max_concurrent=2,
                   runs_dir=runs_dir, progress=False)  # fmt: skip
    return float(trials.final_reward.mean())


def budget_plot(runs: dict[str, pd.DataFrame], ax: Axes) -> None:
    """RL steps spent per decade of learning rate, one bar per search: where the budget went."""
    edges = np.arange(-5, 1)
    width = 0.8 / len(runs)
    for i, (name, trials) in enumerate(runs.items()):
        decade = np.floor(np.log10(trials.learning_rate.to_numpy(dtype=float))).clip(-5, -1)
        spent = [trials.steps_done[decade == d].sum() for d in edges[:-1]]
        ax.bar(edges[:-1] + 0.1 + i * width, spent, width=width, align="edge", color=f"C{i}", label=name)
    ax.set_xticks(edges, [f"1e{e}" for e in edges])
    ax.set(xlabel="learning rate (decade)", ylabel="RL steps spent", title="where the budget went")
    ax.legend(loc="best", fontsize="small")


def optuna_part(budget: int, figure: str) -> None:
    print(f"optuna lesson: Adam learning rate in [1e-5, 1] (log), TPE, {STEPS}-step trials, budget {budget} RL steps")
    runs: dict[str, pd.DataFrame] = {}
    with tempfile.TemporaryDirectory(prefix="rlnb-bench-") as tmp:
        for name, pruner in (("no pruning", None), ("median pruning", "median")):
            trials, wall = search(pruner, budget, tmp)
            runs[name] = trials
            done = trials[trials.status == "COMPLETED"]
            best = done.loc[done.value.idxmax()]
            pruned = int((trials.status == "PRUNED").sum())
            fresh = check(float(best.learning_rate), tmp)
            print(f"    {name:15s} {len(trials):2d} trials ({pruned} pruned), {int(trials.steps_done.sum())} steps, "
                  f"{wall:5.1f} s; best learning rate {best.learning_rate:.3g} (reward {best.value:.3f}); "
                  f"on seeds {CHECK_SEEDS}: {fresh:.3f}")  # fmt: skip
            decades = np.floor(np.log10(trials.learning_rate.to_numpy(dtype=float))).clip(-5, -1)
            spent = ", ".join(f"1e{int(d)}: {int(trials.steps_done[decades == d].sum())}" for d in range(-5, 0))
            print(f"      steps by decade of learning rate: {spent}")
            for _, t in trials.sort_values("learning_rate").iterrows():
                print(
                    f"      lr {t.learning_rate:9.3g}  {t.status:9s} {int(t.steps_done):2d} steps  reward {t.value:.3f}"
                )
    fig = Figure(figsize=(13, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (name, trials) in zip(axes, runs.items(), strict=False):
        search_plot(trials, ax=ax).set_title(f"{name}: {len(trials)} trials, {int(trials.steps_done.sum())} steps")
        ax.set_ylabel("reward (mean of the last 5 steps)")
    budget_plot(runs, axes[2])
    Path(figure).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    print(f"    figure: {figure}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--figure", default="docs/assets/optuna-pruning.png")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    optuna_part(args.budget, args.figure)
