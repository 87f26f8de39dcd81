"""A plot's texts are drawn as written (no TeX), but a numeric axis' ticks are matplotlib's own text: a log axis
writes them in its TeX (``$\\mathdefault{10^{-2}}$``), which must stay TeX."""

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

from rlnb.viz import plots


def test_a_plot_made_log_afterwards_draws_its_ticks_as_powers_of_ten():
    """``plots.metric(...)`` then ``ax.set_yscale("log")`` (as docs/history.md says works): the ticks read
    "$\\mathdefault{10^{2}}$", the characters, since every text of the axes, its ticks too, was set to be written."""
    steps = pd.DataFrame({"step": range(1, 50), "loss $a$": np.geomspace(100, 0.01, 49)})
    ax = plots.metric(steps, "loss $a$")
    ax.set_yscale("log")
    FigureCanvasAgg(ax.figure).draw()
    ticks = [t for t in ax.get_yticklabels() if t.get_text()]
    assert ticks and all("mathdefault" in t.get_text() and t.get_parse_math() for t in ticks)
    assert ax.get_title() == "loss $a$" and not ax.title.get_parse_math()  # the user's name: as written


def test_text_ticks_are_still_drawn_as_written():
    """The timeline's lanes (fixed tick labels) are names, not numbers: drawn as written."""
    ops = pd.DataFrame({"kind": ["cost $5", "cost $6"], "status": "TRAINING_OPERATION_STATUS_COMPLETED",
                        "error_code": None, "submitted_at": pd.to_datetime([0, 1], unit="s", utc=True),
                        "started_at": pd.to_datetime([0, 1], unit="s", utc=True),
                        "finished_at": pd.to_datetime([0.5, 1.5], unit="s", utc=True)})  # fmt: skip
    ax = plots.timeline(ops)
    FigureCanvasAgg(ax.figure).draw()
    lanes = [t for t in ax.get_yticklabels() if t.get_text()]
    assert [t.get_text() for t in lanes] == ["cost $5", "cost $6"] and not any(t.get_parse_math() for t in lanes)
