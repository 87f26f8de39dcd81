"""How plots and tables name the figures rlnb logs: a reader sees "distinct completions per group", not the key
``completions/distinct_mean`` it is logged under (the key stays in a table header's tooltip). One catalogue, for
the overview's panels, ``compare``'s titles and axes, and the live view's RL-metrics table."""

from __future__ import annotations

from typing import NamedTuple

from rlnb._input.shown import printable
from rlnb.history.figures import EVAL_ACCURACY
from rlnb.history.figures import RLMetric as R


class Shown(NamedTuple):
    """A figure's name in a plot (title, axis, legend) and in a table's header, where columns must stay narrow."""

    long: str
    short: str


SHOWN: dict[str, Shown] = {
    R.REWARD: Shown("reward", "reward"),
    R.REWARD_STD: Shown("reward std", "std"),
    R.ZERO_STD: Shown("groups with zero reward std", "zero-std"),
    R.MEAN_LENGTH: Shown("mean completion length (tokens)", "len"),
    R.MIN_LENGTH: Shown("shortest completion (tokens)", "len min"),
    R.MAX_LENGTH: Shown("longest completion (tokens)", "len max"),
    R.CLIPPED: Shown("completions cut at max_tokens", "cut"),
    R.DISTINCT: Shown("distinct completions per group", "distinct"),
    R.ENTROPY: Shown("entropy (nats per token)", "H"),
    R.KL: Shown("KL to the reference", "KL"),
    R.CLIP_LOW: Shown("tokens clipped low", "clip lo"),
    R.CLIP_HIGH: Shown("tokens clipped high", "clip hi"),
    R.CLIP_REGION: Shown("tokens whose ratio was clipped", "clipped"),
    EVAL_ACCURACY: Shown("eval accuracy (held out)", "eval acc"),
}
"""Each RL metric ``rl_step`` logs (``history.figures.RL_METRICS``) and the eval accuracy, by its key."""


def long_name(key: str) -> str:
    """``key``'s name in a plot; a figure the catalogue lacks (the user's own) is shown as it was logged."""
    return SHOWN[key].long if key in SHOWN else printable(key)


def short_name(key: str) -> str:
    """``key``'s name in a table header."""
    return SHOWN[key].short if key in SHOWN else printable(key)
