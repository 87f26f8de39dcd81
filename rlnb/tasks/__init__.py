"""Teaching tasks small enough to learn in a minute on two CPU cores: the gameable ``digits`` task
(``task``), verifiable tasks with a held-out split and ``evaluate`` (``verified``; the built-in ones and ``TASKS``,
``builtin``), next-token text for
supervised runs (``corpus``), one RL step (``rl``), the scoring and metrics of its completions
(``rollouts``) and one measured training run that lessons are judged on (``lesson``)."""

from rlnb.history.figures import EVAL_ACCURACY, RL_METRICS
from rlnb.tasks.builtin import TASKS, addition_task, first_letter_task
from rlnb.tasks.rl import MAX_STEPS, SEED_STRIDE, StepReport, check_steps, rl_step, seed_range
from rlnb.tasks.rollouts import (
    AdvantageScale,
    Rollout,
    group_advantages,
    score,
    step_metrics,
    unscored,
)
from rlnb.tasks.task import Task, digit_fraction, digits_task
from rlnb.tasks.verified import EVAL_EVERY, VerifiedTask, exact_match

__all__ = [
    "EVAL_ACCURACY",
    "EVAL_EVERY",
    "MAX_STEPS",
    "RL_METRICS",
    "SEED_STRIDE",
    "TASKS",
    "AdvantageScale",
    "Rollout",
    "StepReport",
    "Task",
    "VerifiedTask",
    "addition_task",
    "check_steps",
    "digit_fraction",
    "digits_task",
    "exact_match",
    "first_letter_task",
    "group_advantages",
    "rl_step",
    "score",
    "seed_range",
    "step_metrics",
    "unscored",
]
