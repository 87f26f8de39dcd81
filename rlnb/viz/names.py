"""How plots and tables name the figures rlnb logs: a reader sees "distinct completions per group", not the key
``completions/distinct_mean`` it is logged under (the key stays in a table header's tooltip). One catalogue, for
the overview's panels, ``compare``'s titles and axes, and the live view's RL-metrics table."""

from __future__ import annotations

from typing import NamedTuple

from rlnb._shown import printable
from rlnb.tasks import EVAL_ACCURACY


class Shown(NamedTuple):
    """A figure's name in a plot (title, axis, legend) and in a table's header, where columns must stay narrow."""

    long: str
    short: str


SHOWN: dict[str, Shown] = {
    "reward": Shown("reward", "reward"),
    "reward_std": Shown("reward std", "std"),
    "frac_reward_zero_std": Shown("groups with zero reward std", "zero-std"),
    "completions/mean_length": Shown("mean completion length (tokens)", "len"),
    "completions/min_length": Shown("shortest completion (tokens)", "len min"),
    "completions/max_length": Shown("longest completion (tokens)", "len max"),
    "completions/clipped_ratio": Shown("completions cut at max_tokens", "cut"),
    "completions/distinct_mean": Shown("distinct completions per group", "distinct"),
    "entropy": Shown("entropy (nats per token)", "H"),
    "kl": Shown("KL to the reference", "KL"),
    "clip_ratio/low_mean": Shown("tokens clipped low", "clip lo"),
    "clip_ratio/high_mean": Shown("tokens clipped high", "clip hi"),
    "clip_ratio/region_mean": Shown("tokens whose ratio was clipped", "clipped"),
    EVAL_ACCURACY: Shown("eval accuracy (held out)", "eval acc"),
}
"""Each RL metric ``rl_step`` logs (``rlnb.tasks.RL_METRICS``) and the eval accuracy, by its key."""


def long_name(key: str) -> str:
    """``key``'s name in a plot; a figure the catalogue lacks (the user's own) is shown as it was logged."""
    return SHOWN[key].long if key in SHOWN else printable(key)


def short_name(key: str) -> str:
    """``key``'s name in a table header."""
    return SHOWN[key].short if key in SHOWN else printable(key)
