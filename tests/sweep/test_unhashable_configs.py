"""A config column holding lists, dicts or arrays (typed into the table by hand, or read back from JSON):
``summarize`` groups its trials by the values they mean, and ``search_plot`` against it names why it cannot draw it.
Both raised pandas' or its own error about something else: ``unhashable type: 'list'``, "mixes text (None)"."""

import numpy as np
import pandas as pd
import pytest

from rlnb.sweep import search_plot, summarize


def trials(betas, values) -> pd.DataFrame:
    n = len(betas)
    table = pd.DataFrame({"trial": range(n), "label": [f"betas={b}" for b in betas], "learning_rate": [1e-3] * n,
                          "betas": betas, "seed": [i % 2 for i in range(n)], "status": ["COMPLETED"] * n,
                          "final_reward": values, "value": values})  # fmt: skip
    table.attrs["objective"] = "reward"
    return table


def test_summarize_groups_trials_by_the_lists_they_hold():
    table = trials([[0.9, 0.99], [0.9, 0.99], [0.8, 0.9], [0.8, 0.9]], [0.1, 0.3, 0.5, 0.9])
    summary = summarize(table)
    assert summary["mean"].to_dict() == {
        (0.001, (0.8, 0.9)): pytest.approx(0.7),
        (0.001, (0.9, 0.99)): pytest.approx(0.2),
    }
    assert summary.index.tolist() == [(0.001, (0.8, 0.9)), (0.001, (0.9, 0.99))]  # sorted by value
    assert summary["count"].tolist() == [2, 2]
    assert isinstance(table["betas"][0], list)  # the caller's table is left as it was


def test_summarize_keys_nested_lists_dicts_and_arrays_by_value():
    values = [[[1, 2], 3], [[1, 2], 3], {"b": 1, "a": [2]}, {"a": [2], "b": 1}, np.array([1.0, 2.0]), np.array([1, 2])]
    table = trials(values, [1.0, 3.0, 5.0, 7.0, 2.0, 4.0]).drop(columns="label")
    summary = summarize(table)
    assert summary["count"].tolist() == [2, 2, 2]  # each pair is one config
    assert sorted(summary["mean"].tolist()) == [2.0, 3.0, 6.0]


def test_search_plot_against_a_column_of_lists_names_what_it_holds():
    table = trials([[0.9, 0.99], [0.8, 0.9]], [0.1, 0.5])
    with pytest.raises(ValueError, match=r"x='betas' holds \[0\.9, 0\.99\], which is neither a number nor text"):
        search_plot(table, x="betas")
    assert search_plot(table).get_xlabel() == "learning_rate"  # the list column beside it does not matter
