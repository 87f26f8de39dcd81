"""One measured training run of a verifiable task (``train``): the numbers a lesson's claim is judged on.

The presets' claims (``rlnb.widgets.presets.LESSONS``), ``bench/bench_lessons.py`` (seeds 0-9) and the
tests (seeds 0-2) all judge the same record, made the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlnb import wire
from rlnb._input.checks import check_int
from rlnb.errors import OperationFailed
from rlnb.history.figures import EVAL_ACCURACY, RLMetric
from rlnb.params import OptimizerParams
from rlnb.session import Session
from rlnb.tasks.exact import finite_mean
from rlnb.tasks.rl import MAX_STEPS, SEED_STRIDE, check_steps, group_size_for, rl_step, seed_range
from rlnb.tasks.verified import EVAL_EVERY, VerifiedTask


@dataclass
class LessonRun:
    """What ``train`` measured: eval accuracy at some steps, the training reward per step, and collapse."""

    accuracy: dict[int, float] = field(default_factory=dict)
    """Held-out accuracy (``VerifiedTask.evaluate``) by step; step 0 is before training."""
    rewards: list[float] = field(default_factory=list)
    """Mean training reward (sampled at temperature 1) of each completed step."""
    distinct: float = math.nan
    """Distinct completions per group at the last step (``completions/distinct_mean``): 1 = collapsed."""
    failed: str = ""
    """The error code of the step that failed (e.g. NON_FINITE_LOSS), or empty."""

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[max(self.accuracy)]

    @property
    def final_reward(self) -> float:
        """The mean training reward of the last five steps (NaN before any)."""
        return finite_mean(self.rewards[-5:]) if self.rewards else math.nan


def train(
    session: Session,
    task: VerifiedTask,
    params: OptimizerParams,
    steps: int,
    *,
    eval_every: int = EVAL_EVERY,
    seed: int = 0,
) -> LessonRun:
    """``steps`` RL steps of ``task`` (``rl_step``, sampling seeds from ``seed`` as a sweep trial does), the
    held-out accuracy before, every ``eval_every`` steps and at the end. A failed step ends the run and is
    recorded (``failed``), not raised: a lesson may be that the run fails. The accuracy is also logged to
    the history as ``eval/accuracy``."""
    steps = check_steps(steps, 0)
    # one above ``steps`` is taken (the default 10 in a 5-step lesson): the accuracy before and at the end only
    eval_every = check_int(
        "eval_every",
        eval_every,
        1,
        MAX_STEPS,
        why="the most steps one run takes, MAX_STEPS; one "
        "above the lesson's steps evaluates before its first step and after its last only",
    )
    seed = check_int("seed", seed, *seed_range(steps))  # checked by rl_step as seed * SEED_STRIDE + i, after an eval
    if not isinstance(task, VerifiedTask):  # it has no held-out split: a bare AttributeError for 'evaluate'
        raise TypeError(f"task must be a VerifiedTask, such as first_letter_task(), got {type(task).__name__} "
                        f"{getattr(task, 'name', task)!r}")  # fmt: skip
    params = session.check_params(params)  # as rl_step does, but before the step-0 evaluation is logged
    group_size_for(session, task)
    run = LessonRun()
    run.accuracy[session.step] = log_accuracy(session, task)
    for i in range(steps):
        try:
            report = rl_step(session, task, params, seed=seed * SEED_STRIDE + i)
        except OperationFailed as exc:
            run.failed = exc.code or wire.OperationStatus.FAILED.name
            break
        run.rewards.append(report.reward)
        run.distinct = report.metrics[RLMetric.DISTINCT]
        if (i + 1) % eval_every == 0 or i + 1 == steps:
            run.accuracy[session.step] = log_accuracy(session, task)
    return run


def log_accuracy(session: Session, task: VerifiedTask) -> float:
    """Held-out accuracy at the session's step, logged to its history as ``eval/accuracy`` (the overview
    plot draws it beside the reward)."""
    accuracy = task.evaluate(session)
    session.history.log(session.step, **{EVAL_ACCURACY: accuracy})
    return accuracy
