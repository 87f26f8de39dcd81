"""Sweeps attacked by a researcher who uses them seriously (hostile7): each a defect seen, then fixed."""

import pytest

import rlnb
from rlnb.sweep import Categorical, random_search
from rlnb.sweep.space import parse_space


@pytest.mark.parametrize("choices", ["adam", "12", 5, None, {"adam": 1}])
def test_a_categorical_of_no_list_is_refused_naming_the_field(choices):
    """``Categorical("adam")`` tried "a", "d", "a", "m", refused as "'a' more than once"; ``Categorical("12")`` the
    texts "1" and "2"; ``Categorical(5)`` was a bare "'int' object is not iterable"."""
    with pytest.raises(ValueError, match=r"space\['optimizer'\]: Categorical takes a list of choices"):
        parse_space(rlnb.AdamParams(), {"optimizer": Categorical(choices)})
    with pytest.raises(ValueError, match=r"space\['learning_rate'\]: Categorical takes a list of choices"):
        random_search(1, learning_rate=Categorical(choices))


def test_a_categorical_of_a_tuple_or_range_still_reads():
    assert parse_space(rlnb.MuonParams(), {"optimizer": Categorical(("adam", "muon"))})["optimizer"].choices == (
        "adam",
        "muon",
    )
    assert random_search(3, newton_schulz_steps=Categorical(range(3, 6)), seed=1)


def test_converting_a_tensor_rate_reads_its_number():
    """A 0-d tensor (a rate read off a schedule or an optimizer's param group) was "invalid: must be a finite number
    > 0"; numpy's was taken."""
    import torch

    from rlnb.sweep import convert_muon_lr

    assert convert_muon_lr(torch.tensor(0.02), "original", "match_adam", [(8, 8)]) == pytest.approx(
        0.02 / (0.2 * 8**0.5)
    )


@pytest.mark.parametrize(("lr", "from_", "to"), [(1e308, "match_adam", "original"), (5e-324, "original", "match_adam")])
def test_a_rate_converted_past_what_a_float_holds_is_refused(lr, from_, to):
    """1e308 came back as inf, 5e-324 as 0.0, in silence: no rate a session takes."""
    from rlnb.sweep import convert_muon_lr

    with pytest.raises(ValueError, match=r"learning_rate = .* units, no rate a float can hold"):
        convert_muon_lr(lr, from_, to, [(4, 40000)])


@pytest.mark.parametrize("ax", [5, "figure"])
def test_plotting_a_range_test_on_what_is_no_axes_names_ax(ax):
    """``found.plot(ax=fig)`` (a Figure, not its axes) was "'Figure' object has no attribute 'plot'", as
    ``search_plot``'s was before it checked ``ax``."""
    from rlnb.sweep import LRFind
    from rlnb.viz.plots import NotebookFigure

    found = LRFind([1e-3, 1e-2], [1.0, 0.5], [1.0, 0.5], None, "loss", "adam", None, "no clear suggestion: few steps")
    given = NotebookFigure() if ax == "figure" else ax
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        found.plot(ax=given)
    assert found.plot().get_xscale() == "log"


def test_an_ablation_with_a_typod_field_names_its_variant(tmp_path):
    """``ablate`` of ten variants, one with ``wieght_decay``: "AdamParams.wieght_decay = 0.0 is invalid: unknown
    field" named no variant (nor did a value out of range)."""
    from rlnb.errors import InvalidParams
    from rlnb.sweep import ablate

    changes = {"higher lr": {"learning_rate": 1e-2}, "no decay": {"wieght_decay": 0.0}}
    with pytest.raises(
        InvalidParams, match=r"^changes\['no decay'\]: AdamParams.wieght_decay = 0.0 is invalid: unknown"
    ):
        ablate(rlnb.AdamParams(), changes, seeds=[0], steps=1, progress=False, runs_dir=tmp_path)
    with pytest.raises(InvalidParams, match=r"^changes\['adam lr'\]: MuonParams.adam.learning_rate = -1.0 is invalid"):
        ablate(rlnb.MuonParams(), {"adam lr": {"adam": {"learning_rate": -1.0}}}, runs_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # before any sweep folder


def test_a_sweeps_bad_config_is_named_by_its_place_in_the_list(tmp_path):
    """A grid's or a hand-made list's config with a bad value named neither the config nor its place."""
    from rlnb.errors import InvalidParams
    from rlnb.sweep import sweep

    configs = [{"learning_rate": 1e-3}, {"learning_rate": 1e-2, "beta1": 1.5}]
    with pytest.raises(InvalidParams, match=r"^configs\[1\]: AdamParams.beta1 = 1.5 is invalid") as raised:
        sweep(rlnb.AdamParams(), configs, steps=1, progress=False, runs_dir=tmp_path)
    assert raised.value.errors[0][:2] == ("beta1", 1.5)
    assert list(tmp_path.iterdir()) == []


def test_a_search_spaces_bad_bound_names_its_field_and_the_optimizer_that_refuses_it():
    """``{"optimizer": ["adam", "muon"], "momentum": [0.9]}`` was "AdamParams.momentum = 0.9 is invalid: unknown
    field", naming neither the space's field nor that Adam is the choice that lacks it."""
    from rlnb.errors import InvalidParams

    with pytest.raises(InvalidParams, match=r"^space\['beta1'\]: AdamParams.beta1 = 1.5 is invalid"):
        parse_space(rlnb.AdamParams(), {"beta1": [0.9, 1.5]})
    space = {"optimizer": ["adam", "muon"], "momentum": [0.9]}
    with pytest.raises(
        InvalidParams, match=r"^space\['momentum'\] with optimizer 'adam': AdamParams.momentum = 0.9 is"
    ):
        parse_space(rlnb.AdamParams(), space)


def test_a_trials_row_whose_result_was_edited_to_no_number_reads_as_nan_and_keeps_the_table(tmp_path):
    """``"final_reward": "0.9x"`` (or a list) typed into ``trials.jsonl``: the resumed sweep ran every trial left,
    then raised pandas' bare "could not convert string to float: '0.9x'" building its table, which was lost."""
    import json
    import warnings
    from pathlib import Path

    from rlnb.sweep import grid, sweep

    base, configs = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0), grid(learning_rate=[1e-3, 2e-3])
    first = sweep(base, configs, steps=1, runs_dir=tmp_path, progress=False)
    rows_file = Path(first.attrs["path"]) / "trials.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    rows[0]["final_reward"], rows[1]["wall_s"] = "0.9x", [1]
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = sweep(base, configs, steps=1, resume=rows_file.parent, progress=False)
    messages = [str(w.message) for w in caught]
    assert any(f"{rows_file} line 1: trial 0's final_reward '0.9x' is no number" in m for m in messages), messages
    assert any(f"{rows_file} line 2: trial 1's wall_s [1] is no number" in m for m in messages), messages
    assert list(again.trial) == [0, 1] and again.final_reward.isna().tolist() == [True, False]
    assert again.wall_s.isna().tolist() == [False, True] and again.final_loss.tolist() == first.final_loss.tolist()


def test_summarize_counts_a_completed_trial_without_a_value():
    """A seed that diverged (its loss NaN at every step of the window: ``value`` NaN) COMPLETED, and was in neither
    ``count`` nor ``not_completed``: the config read "count 2, not_completed 0" for three seeds, its mean the two
    others'."""
    import math

    import pandas as pd

    from rlnb.sweep import summarize

    trials = pd.DataFrame({
        "trial": [0, 1, 2, 3], "label": ["a"] * 3 + ["b"], "learning_rate": [1e-3] * 3 + [1e-2], "seed": [0, 1, 2, 0],
        "status": ["COMPLETED"] * 3 + ["FAILED"], "value": [0.5, 0.7, math.nan, math.nan],
    })  # fmt: skip
    table = summarize(trials, "value")
    assert table.loc[1e-3, ["count", "not_completed", "no_value"]].tolist() == [2, 0, 1]
    assert table.loc[1e-2, ["count", "not_completed", "no_value"]].tolist() == [0, 1, 0]
    two = summarize(trials.assign(momentum=[0.9, 0.9, 0.9, 0.95]), "value")  # several config columns
    assert two["no_value"].tolist() == [1, 0] and two["count"].tolist() == [2, 0]
