"""Plots of an operations table whose rows are in another order than the operations ran: sorted by a column in
pandas or a spreadsheet, or read back from such a file."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest

from rlnb.viz import plots
from tests.support.histories import T0, hand_history


@pytest.mark.parametrize("order", ["kind", "reversed", "shuffled"])
def test_an_operations_table_in_another_order_plots_each_loss_at_its_step(order):
    """``plots.loss(h.df.sort_values("kind"))`` fed the rows to the steps table as they stood: every forward-backward
    before any optim-step, so step 1 drew the sum of all four losses (10.0) and the others none, without a word."""
    h = hand_history([1.0, 2.0, 3.0, 4.0], [0.1, 0.2, 0.3, 0.4])
    df = {"kind": h.df.sort_values("kind"), "reversed": h.df.iloc[::-1],
          "shuffled": h.df.sample(frac=1, random_state=1)}[order]  # fmt: skip
    expected = plots.loss(h).lines[0].get_xydata().tolist()
    assert expected == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    assert plots.loss(df).lines[0].get_xydata().tolist() == expected
    assert plots.overview(df).axes[0].lines[0].get_xydata().tolist() == expected


@pytest.mark.parametrize("order", ["kind", "reversed"])
def test_an_operations_table_in_another_order_draws_the_timelines_lanes_in_order_of_first_submission(order):
    """The lanes went by the rows' order (optim-step first for a reversed table), as did the "latest" failures
    that get their error code."""
    h = hand_history([1.0, 2.0], [0.1, 0.2])
    df = {"kind": h.df.sort_values("kind", ascending=False), "reversed": h.df.iloc[::-1]}[order]
    lanes = [t.get_text() for t in plots.timeline(df, now=T0 + 10).get_yticklabels()]
    assert lanes == [t.get_text() for t in plots.timeline(h, now=T0 + 10).get_yticklabels()]
    assert lanes == ["forward-backward", "optim-step"]
