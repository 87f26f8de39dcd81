"""A config records only the fields it sets; the table fills in every config field another trial sets with the value
the trial ran with (the base's, else the optimizer's default), so an ablation's baseline has its learning rate."""

import matplotlib
import numpy as np

import rlnb
from rlnb.sweep import ablate, search_plot, summarize

matplotlib.use("Agg")


def test_an_ablations_rows_have_the_rate_and_decay_each_trial_ran_with_and_all_are_drawn(tmp_path):
    """The baseline and ``wd`` set no learning rate: they ran the base's 3e-2 (NaN in the table, so ``search_plot``
    drew only ``low lr``'s row and put its star at NaN); ``low lr`` and the baseline set no decay: AdamW's 0.1."""
    base = rlnb.AdamParams(learning_rate=3e-2)
    changes = {"low lr": {"learning_rate": 1e-4}, "wd": {"weight_decay": 0.5}}
    trials, _ = ablate(base, changes, seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    ran = trials.set_index("variant")[["learning_rate", "weight_decay"]]
    assert ran.to_dict("index") == {
        "baseline": {"learning_rate": 3e-2, "weight_decay": 0.1},
        "low lr": {"learning_rate": 1e-4, "weight_decay": 0.1},
        "wd": {"learning_rate": 3e-2, "weight_decay": 0.5},
    }
    assert list(trials.label) == ["baseline", "learning_rate=0.0001", "weight_decay=0.5"]  # what each config set
    ax = search_plot(trials, y="final_reward")
    drawn = np.concatenate([np.asarray(c.get_offsets(), float) for c in ax.collections])
    assert len(drawn) == 4 and np.isfinite(drawn).all()  # 3 trials and the star
    assert summarize(trials).index.get_level_values("learning_rate").tolist() == [3e-2, 1e-4, 3e-2]
