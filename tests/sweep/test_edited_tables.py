"""``summarize`` and ``search_plot`` on tables a notebook user made or edited: two sweeps' tables concatenated,
a column dropped, text where numbers were, a text column as the x axis. Each draws or summarises, or names the
argument and what it must be; none ends in a traceback from deep inside pandas or matplotlib."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from rlnb.sweep import search_plot, summarize


def trials(rates, values, optimizer="adam") -> pd.DataFrame:
    n = len(rates)
    table = pd.DataFrame({"trial": range(n), "label": [f"learning_rate={r:.3g}" for r in rates],
                          "optimizer": [optimizer] * n, "learning_rate": rates, "seed": [0] * n,
                          "status": ["COMPLETED"] * n, "final_reward": values, "value": values,
                          "run_path": [f"trial-{i}" for i in range(n)]})  # fmt: skip
    table.attrs["objective"] = "reward"
    return table


def star(ax) -> list[list[float]]:
    return [c for c in ax.collections if isinstance(c, PathCollection)][-1].get_offsets().tolist()


def test_search_plot_of_two_sweeps_tables_concatenated_stars_the_best():
    """``pd.concat([coarse, fine])`` repeats the index labels 0, 1, ...: ``.loc`` of the best label gave two rows,
    and drawing its star was ``TypeError: unsupported format string passed to Series.__format__``."""
    both = pd.concat([trials([1e-4, 1e-2], [0.2, 0.5]), trials([3e-3, 5e-3], [0.7, 0.6])])
    ax = search_plot(both)
    assert star(ax) == [[3e-3, 0.7]]
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "best trial learning_rate 0.003"


def test_search_plot_against_a_text_column_names_the_best_category():
    """``x="optimizer"``: the trials were drawn, then the star's label was ``Unknown format code 'g'`` for a str."""
    both = pd.concat([trials([1e-3], [0.2]), trials([1e-3], [0.9], optimizer="muon")], ignore_index=True)
    ax = search_plot(both, x="optimizer")
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "best trial optimizer muon"
    assert ax.get_xlabel() == "optimizer"


def test_search_plot_names_a_y_of_text_and_an_x_mixing_text_with_numbers():
    """``y="label"`` was drawn as text categories with a star on the last label in order; a number typed over as text
    in the y or x column was matplotlib's bare ``TypeError`` from its unit conversion."""
    table = trials([1e-3, 1e-2], [0.2, 0.5])
    with pytest.raises(ValueError, match=r"y='label' is not a numeric column of these trials; numeric columns: "):
        search_plot(table, y="label")
    typed = table.astype({"value": object})
    typed.loc[0, "value"] = "0.2"
    with pytest.raises(ValueError, match=r"y='value' is not a numeric column"):
        search_plot(typed)
    typed = table.astype({"learning_rate": object})
    typed.loc[0, "learning_rate"] = "1e-3"
    with pytest.raises(ValueError, match=r"x='learning_rate' mixes text \('1e-3'\) with other values \(0.01\)"):
        search_plot(typed)


@pytest.mark.parametrize("call", [summarize, search_plot])
def test_a_table_without_its_status_column_is_named_as_no_sweeps_table(call):
    """``trials.drop(columns="status")`` was ``AttributeError: 'DataFrame' object has no attribute 'status'``
    (``summarize``) or ``KeyError: 'status'`` (``search_plot``)."""
    table = trials([1e-3, 1e-2], [0.2, 0.5]).drop(columns="status")
    with pytest.raises(ValueError, match=rf"{call.__name__}: trials must be a sweep's table of trials \(with its "
                       r"status column\).* got a table of trial, label, optimizer, learning_rate"):  # fmt: skip
        call(table)


def test_summarize_of_a_config_column_mixing_text_and_numbers_keeps_every_config():
    """A config column edited to hold text beside numbers: ``summarize`` was pandas' ``TypeError: '<' not supported
    between instances of 'str' and 'float'`` while sorting; now each config is a row, in the order first seen."""
    table = trials([1e-3, 1e-2, 1e-2], [0.2, 0.5, 0.7]).drop(columns="optimizer").astype({"learning_rate": object})
    table.loc[0, "learning_rate"] = "fast"
    summary = summarize(table)
    assert summary["count"].to_dict() == {"fast": 1, 0.01: 2}
    assert summary.loc[0.01, "mean"] == pytest.approx(0.6)
    assert np.isnan(summary.loc["fast", "std"])


@pytest.mark.parametrize("ax", [5, "left", "a figure"])
def test_search_plot_on_what_is_no_axes_names_ax(ax):
    """``ax=5`` (a subplot's number), or a Figure, was ``AttributeError: 'int' object has no attribute 'scatter'``."""
    import matplotlib.pyplot as plt

    given = plt.figure() if ax == "a figure" else ax  # a Figure is no Axes either: fig.add_subplot() is
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes \(such as fig.add_subplot\(\)\) or None, got "):
        search_plot(trials([1e-3, 1e-2], [0.2, 0.5]), ax=given)
    plt.close("all")
