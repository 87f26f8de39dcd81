"""Notebook widgets: ``OptimizerBuilder`` (a form over the optimizer params, with presets, a schedule
and Find LR) and ``RunPanel`` (Step / Run N / Stop over a session, with a live view)."""

from rlnb.widgets.builder import OptimizerBuilder
from rlnb.widgets.panel import RunPanel
from rlnb.widgets.presets import LESSONS, PRESETS
from rlnb.widgets.steps import StepFn

__all__ = ["LESSONS", "PRESETS", "OptimizerBuilder", "RunPanel", "StepFn"]
