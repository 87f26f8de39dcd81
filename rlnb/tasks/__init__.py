"""Toy RL tasks small enough to learn in a minute on two CPU cores (``task``), one RL step (``rl``), and
the scoring and metrics of its completions (``rollouts``)."""

from rlnb.tasks.rl import StepReport, rl_step
from rlnb.tasks.rollouts import RL_METRICS, AdvantageScale, Rollout, group_advantages, score, step_metrics
from rlnb.tasks.task import Task, digit_fraction, digits_task

__all__ = [
    "RL_METRICS",
    "AdvantageScale",
    "Rollout",
    "StepReport",
    "Task",
    "digit_fraction",
    "digits_task",
    "group_advantages",
    "rl_step",
    "score",
    "step_metrics",
]
