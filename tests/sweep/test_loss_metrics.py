"""A sweep trial's loss is the on-policy GRPO loss of its RL step, ~1e-10 at every rate: ``ablate`` refuses it as its
metric (its delta, ~5e-10, read as a result) and ``search_plot`` draws it without a best star (float rounding ranked
the configs), as ``sweep`` refuses ``objective="loss"``."""

import pandas as pd
import pytest

import rlnb
from rlnb.sweep import ablate, search_plot


@pytest.mark.parametrize("metric", ["final_loss", "best_loss"])
def test_ablate_refuses_a_loss_metric_before_anything_runs(tmp_path, metric):
    with pytest.raises(ValueError, match=rf"metric='{metric}': a sweep trial's loss is the on-policy GRPO loss .*"
                                         "compare final_reward or best_reward"):  # fmt: skip
        ablate(rlnb.AdamParams(), {"hi": {"learning_rate": 3e-2}}, metric=metric, seeds=[0], steps=1,
               runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_ablate_lists_the_metrics_it_takes_without_the_losses(tmp_path):
    with pytest.raises(ValueError, match=r"one of final_reward, best_reward, value, steps_done, wall_s, got 'loss'"):
        ablate(rlnb.AdamParams(), {"hi": {"learning_rate": 3e-2}}, metric="loss", runs_dir=tmp_path)


@pytest.mark.parametrize("y", ["final_loss", "best_loss"])
def test_search_plot_draws_a_loss_without_a_star_and_says_why(y):
    trials = pd.DataFrame({"trial": [0, 1], "learning_rate": [1e-3, 1e-2], "seed": [0, 0], "status": ["COMPLETED"] * 2,
                           y: [4.69e-10, -1.2e-10], "value": [0.2, 0.9]})  # fmt: skip
    ax = search_plot(trials, y=y)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["completed (2)"]
    assert ax.get_title().startswith(f"no best {y} starred: a sweep trial's loss is the on-policy GRPO loss")
    assert len(ax.collections[0].get_offsets()) == 2
