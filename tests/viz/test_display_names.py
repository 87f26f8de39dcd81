"""RL metrics drawn under the names a reader can place (``rlnb.viz.names``), the same in the overview and in
``compare``: notebook 03's compare plot was titled "completions/distinct_mean by run" beside an overview panel saying
"distinct completions per group"."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pandas as pd

from rlnb.history import History
from rlnb.tasks import RL_METRICS
from rlnb.viz import plots
from rlnb.viz.names import SHOWN

DISTINCT = "completions/distinct_mean"


def test_every_rl_metric_has_a_display_name():
    assert set(RL_METRICS) <= set(SHOWN)


def test_compare_names_an_rl_metric_as_the_overview_does():
    frame = pd.DataFrame({"run": "lr=0.002", "seed": 0, "step": [1, 2, 3], DISTINCT: [16.0, 9.0, 4.0]})
    ax = plots.compare(frame, y=DISTINCT)
    assert ax.get_title() == "distinct completions per group by run"
    assert ax.get_ylabel() == "distinct completions per group"
    h = History()
    for step in (1, 2, 3):
        h.log(step, reward=0.1 * step, **{DISTINCT: 16.0 / step})
    assert ax.get_ylabel() in [a.get_title() for a in plots.overview(h).axes]


def test_a_users_own_figure_keeps_its_name():
    frame = pd.DataFrame({"run": "r", "seed": 0, "step": [1, 2], "my/acc": [0.1, 0.2]})
    ax = plots.compare(frame, y="my/acc")
    assert ax.get_title() == "my/acc by run" and ax.get_ylabel() == "my/acc"
