"""Notebook 05's flow on the panel, judged by the default preset's lesson: does it hold under the notebook's schedule?

    python bench/bench_panel_schedule.py [--schedule cosine|constant] [--seeds 0-9]

Per seed: ``OptimizerBuilder("muon", total_steps=40)`` with the schedule (cosine: warmup 3, as notebook 05's cell 3
sets it), a Muon session of the seed on one torch thread, ``RunPanel(session, builder, n_steps=40)``, Step, then
Run 39 (40 RL steps of first_letter, the held-out accuracy every 10). It prints the held-out accuracy at step 40,
the training reward (the mean of the last 5 steps) and whether the lesson's claim holds, then the hit rate. The
lesson was measured at a constant rate (``rlnb.tasks.lesson.train``, bench_lessons.py); this measures what the
notebook's own panel does. Times are CPU seconds per seed.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_lessons import seeds_arg  # one reading of --seeds

import rlnb
from rlnb.widgets import RunPanel
from rlnb.widgets.builder import OptimizerBuilder
from rlnb.widgets.presets import LEARNS_ACCURACY, LEARNS_REWARD, LESSON_STEPS

DEADLINE_S = 1800
"""The longest a seed's Step or Run may take, on a loaded 2-core machine."""


def panel_run(schedule: str, seed: int) -> dict[str, float]:
    """One seed of notebook 05's flow; the held-out accuracy at step 40 and the mean reward of the last 5 steps."""
    builder = OptimizerBuilder("muon", total_steps=LESSON_STEPS)
    builder.sched_kind.value = schedule
    if schedule != "constant":
        builder.warmup.value = 3
    with rlnb.connect("local", optimizer="muon", seed=seed, record=False, threads=1) as session:
        panel = RunPanel(session, builder, n_steps=LESSON_STEPS)
        try:
            panel.step_button.click()
            if not panel.join(DEADLINE_S):
                raise TimeoutError(f"seed {seed}: Step still going after {DEADLINE_S} s")
            panel.n.value = LESSON_STEPS - 1
            panel.run_button.click()
            if not panel.join(DEADLINE_S):
                raise TimeoutError(f"seed {seed}: Run still going after {DEADLINE_S} s")
            if panel.error is not None:
                raise RuntimeError(f"seed {seed}: {panel.error}")
            steps = session.history.steps
            accuracy = steps["eval/accuracy"].dropna().tolist()[-1]
            reward = statistics.fmean(steps["reward"].dropna().tolist()[-5:])
        finally:
            panel.close()
    return {"step": session.step, "accuracy": accuracy, "reward": reward}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedule", default="cosine", choices=["cosine", "constant"])
    ap.add_argument("--seeds", default="0-9", type=seeds_arg, help="e.g. 0-9 or 0,3,5-7")
    args = ap.parse_args()
    hits, accuracy, reward = 0, [], []
    for seed in args.seeds:
        start = time.process_time()
        r = panel_run(args.schedule, seed)
        holds = r["accuracy"] >= LEARNS_ACCURACY and r["reward"] >= LEARNS_REWARD
        hits += holds
        accuracy.append(r["accuracy"])
        reward.append(r["reward"])
        print(
            f"seed {seed}: step {r['step']}, held-out accuracy {r['accuracy']:.3g}, reward (last 5) "
            f"{r['reward']:.3f}, lesson {'holds' if holds else 'fails'} ({time.process_time() - start:.0f} CPU s)",
            flush=True,
        )
    print(
        f"{args.schedule}: the default preset's lesson holds on {hits}/{len(args.seeds)}; held-out accuracy "
        f"{min(accuracy):.3g}-{max(accuracy):.3g}, reward (last 5) {min(reward):.3f}-{max(reward):.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
