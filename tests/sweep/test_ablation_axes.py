"""An ablation's variants against its base: each row's config fields hold the values its trial ran with (a config
records only the fields it sets), and a variant switching the optimizer keeps the base's AdamW part and clip."""

import matplotlib
import numpy as np
import pytest

import rlnb
from rlnb.sweep import ablate, apply, search_plot, summarize

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


@pytest.mark.parametrize(
    ("base", "change", "sent"),
    [  # the docs' example: the AdamParams' fields become Muon's adam group (the embeddings, head and norms)
        (rlnb.AdamParams(weight_decay=0.0), {"optimizer": "muon", "learning_rate": 0.02},
         {"muon_params": {"learning_rate": 0.02, "adam": {"weight_decay": 0.0}}}),
        (rlnb.AdamParams(learning_rate=3e-3, grad_clip_norm=0.5), {"optimizer": "muon"},  # Muon clips by its own
         {"muon_params": {"grad_clip_norm": 0.5, "adam": {"learning_rate": 3e-3}}}),
        (rlnb.MuonParams(learning_rate=0.05, weight_decay=0.2, grad_clip_norm=0.0, adam={"eps": 1e-6}),
         {"optimizer": "adam", "learning_rate": 1e-3}, {"adam_params": {"eps": 1e-6, "grad_clip_norm": 0.0,
                                                                        "learning_rate": 1e-3}}),
        (rlnb.MuonParams(), {"optimizer": "adam"}, {"adam_params": {}}),
    ],
)  # fmt: skip
def test_a_config_switching_the_optimizer_keeps_the_bases_adamw_part_and_clip(base, change, sent):
    """Switching started from the other optimizer's defaults: the variant's AdamW part decayed at 0.1 against the
    baseline's 0.0, and clipping went from off to 1.0, though the label named only the optimizer (and the rate)."""
    assert apply(base, change).request_body() == sent
