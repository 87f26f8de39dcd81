"""The overview's "distinct completions per group" axis runs from 1 (a collapsed group) to the group size: autoscaled,
8 -> 7.83 filled the panel as a cliff (notebook 06, review42c L7), read as the collapse notebook 03 teaches."""

import pytest

from rlnb.history import History
from rlnb.viz import plots

DISTINCT = "completions/distinct_mean"
TITLE = "distinct completions per group"


def panel(values):
    h = History()
    for step, value in enumerate(values, 1):
        h.log(step, reward=0.5, **{DISTINCT: value})
    return next(ax for ax in plots.overview(h).axes if ax.get_title() == TITLE)


@pytest.mark.parametrize(
    ("values", "top"),
    [
        ([8.0, 7.83, 8.0, 7.9], 8),  # a group of 8 that hardly moves: near the top, not a cliff
        ([16.0, 9.0, 4.0, 1.0], 16),  # a collapse: from the top down to the floor
        ([3.5, 3.2, float("nan")], 4),  # the largest whole count seen, NaN left out
    ],
)
def test_the_distinct_completions_axis_runs_from_1_to_the_largest_whole_count(values, top):
    low, high = panel(values).get_ylim()
    assert low == pytest.approx(0.5) and high == pytest.approx(top + 0.5)


def test_an_all_nan_distinct_panel_keeps_its_own_axis():
    low, high = panel([float("nan"), float("nan")]).get_ylim()
    assert low < high  # no limits from no value (and no error)
