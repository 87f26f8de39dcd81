"""Toy RL tasks small enough to learn in a minute on two CPU cores (``task``), and one RL step (``rl``)."""

from rlnb.tasks.rl import StepReport, group_advantages, rl_step
from rlnb.tasks.task import Task, digit_fraction, digits_task

__all__ = ["StepReport", "Task", "digit_fraction", "digits_task", "group_advantages", "rl_step"]
