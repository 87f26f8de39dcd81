"""A trial whose loss went NaN / inf says so in its row (``diverged_at``, ``final_loss`` NaN), and the summaries and
figure count it: its row reported its last finite loss as ``final_loss``, and it read as healthy."""

import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
from torch import nn

import rlnb
from rlnb.sweep import ablate, search_plot, summarize, sweep
from rlnb.sweep.trial import summary


class _Diverging(nn.Module):
    """A model whose training forward gives NaN logits from its second step on (its first is finite)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(256, 16)
        self.head = nn.Linear(16, 256, bias=False)
        self.calls = 0

    def forward(self, idx):
        out = self.head(torch.tanh(self.emb(idx)))
        if self.training and torch.is_grad_enabled():
            self.calls += 1
            if self.calls > 1:
                return out * math.nan
        return out


@pytest.mark.slow
def test_a_trial_whose_loss_went_nan_says_where_and_has_no_final_loss(tmp_path):
    trials = sweep(rlnb.AdamParams(), [{"learning_rate": 1e-2}], model=_Diverging(), steps=3, runs_dir=tmp_path,
                   progress=False, device="cpu", threads=1)  # fmt: skip
    row = trials.iloc[0]
    assert row.status == "FAILED" and "NON_FINITE_LOSS" in row.reason
    assert row.diverged_at == 2 and math.isnan(row.final_loss)  # it was the first step's finite loss
    assert math.isfinite(row.best_loss)  # the best it reached, before
    assert summarize(trials)["diverged"].tolist() == [1]


@pytest.mark.slow
def test_ablate_summary_counts_diverged_and_no_value(tmp_path):
    options = {
        "model": _Diverging(),
        "steps": 2,
        "runs_dir": tmp_path,
        "progress": False,
        "device": "cpu",
        "threads": 1,
    }
    trials, table = ablate(
        rlnb.AdamParams(learning_rate=1e-2), {"higher": {"learning_rate": 2e-2}}, seeds=(0,), **options
    )
    assert table["diverged"].tolist() == [1, 1] and table["no_value"].tolist() == [0, 0]


def test_a_completed_trial_whose_last_loss_is_not_finite_has_a_nan_final_loss():
    """A remote provider may complete a step whose loss is NaN: the row's final_loss was the last finite one."""
    got = summary(None, [0.2, 0.3, 0.1], [0.5, math.inf, math.nan], "reward")
    assert got["diverged_at"] == 2 and math.isnan(got["final_loss"]) and math.isnan(got["best_loss"])
    healthy = summary(None, [0.2], [0.5], "reward", reason=None)
    assert healthy["diverged_at"] is None


def _rows():
    config = {"label": "lr=0.1", "learning_rate": 0.1, "trial": 0, "seed": 0}
    return pd.DataFrame([
        {**config, "status": "COMPLETED", "final_reward": 0.9, "diverged_at": 3, "value": 0.9},
        {**config, "trial": 1, "seed": 1, "status": "COMPLETED", "final_reward": math.nan, "diverged_at": None,
         "value": math.nan},
        {**config, "trial": 2, "seed": 2, "label": "lr=0.01", "learning_rate": 0.01, "status": "COMPLETED",
         "final_reward": 0.5, "diverged_at": None, "value": 0.5},
    ])  # fmt: skip


def test_summarize_counts_diverged_trials_beside_no_value():
    table = summarize(_rows())
    assert table.loc[0.1, ["diverged", "no_value", "count"]].tolist() == [1, 1, 1]
    assert table.loc[0.01, ["diverged", "no_value", "count"]].tolist() == [0, 0, 1]


def test_search_plot_never_stars_a_diverged_trial():
    """The diverged trial has the highest reward: it was starred as the best learning rate."""
    fig, ax = plt.subplots()
    search_plot(_rows(), ax=ax)
    labels = ax.get_legend_handles_labels()[1]
    plt.close(fig)
    assert "best trial learning_rate 0.01" in labels and "diverged (1)" in labels
