"""``ablate``'s variant names are the keys of ``changes``: one that is no name is refused naming ``changes`` — the
error named ``variants``, an argument of ``sweep`` the caller never passed, and listed the hidden baseline."""

import re

import pytest

import rlnb
from rlnb.sweep import ablate

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


@pytest.mark.parametrize("name", [1, "", None])
def test_an_ablation_variant_name_that_is_no_text_is_refused_naming_changes(tmp_path, name):
    with pytest.raises(ValueError, match=rf"changes: each variant's name must be a non-empty string, got {name!r}"):
        ablate(BASE, {"higher": {"learning_rate": 1e-2}, name: {"learning_rate": 1e-4}}, seeds=[0], steps=1,
               runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("field", [5, None, ("weight_decay",), b"weight_decay"])
def test_an_ablation_change_whose_field_is_no_text_is_refused_naming_its_variant(tmp_path, field):
    """``{"wd": {5: 0.1}}`` ended in an ``AttributeError: 'int' object has no attribute 'partition'`` (a bytes key:
    a ``TypeError``), naming neither the variant nor the field."""
    with pytest.raises(ValueError, match=rf"changes\['wd'\]: unknown field {re.escape(repr(field))}; allowed fields"):
        ablate(BASE, {"wd": {field: 0.1}}, seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_an_ablation_change_of_an_empty_group_is_refused_as_an_empty_change(tmp_path):
    """``{"nothing": {"adam": {}}}`` changes no field: its trials ran the baseline again under another name."""
    with pytest.raises(ValueError, match=r"changes\['nothing'\] is empty: it repeats 'baseline'"):
        ablate(rlnb.MuonParams(), {"nothing": {"adam": {}}}, seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("base", "change"),
    [
        (BASE, {"weight_decay": 0.0}),  # the base's own value
        (BASE, {"learning_rate": 3e-3}),
        (BASE, {"optimizer": "adam"}),  # the base's kind
        (rlnb.AdamParams(weight_decay=0.0), {"learning_rate": None}),  # unset, as the base's learning rate is
    ],
)
def test_an_ablation_change_that_sends_the_baseline_params_is_refused_naming_it(tmp_path, base, change):
    """``{"no decay": {"weight_decay": 0.0}}`` on a base with no decay ran the baseline again and reported its delta
    as a measurement ("weight decay makes no difference"), though nothing was tested."""
    with pytest.raises(ValueError, match=r"changes\['same'\] .* sends the same params as 'baseline'"):
        ablate(base, {"higher": {"learning_rate": 1e-2}, "same": change}, seeds=[0], steps=1, runs_dir=tmp_path,
               progress=False)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("base", "change"),
    [
        (BASE, {"learning_rate": None}),
        (rlnb.AdamParams(), {"optimizer": "muon"}),  # {'muon_params': {}} against {'adam_params': {}}: not the same
    ],
)
def test_an_ablation_change_to_the_targets_default_is_a_change(tmp_path, base, change):
    """``{"learning_rate": None}`` on a base that sets one sends no rate: the target's default, another request."""
    trials, summary = ablate(base, {"default": change}, seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    assert list(summary.index) == ["baseline", "default"] and list(trials.status) == ["COMPLETED"] * 2


@pytest.mark.parametrize(
    ("base", "change"),
    [
        (rlnb.MuonParams(), {"adam": {"learning_rate": None}}),  # sends {'adam': {}}: no override, as none
        (rlnb.MuonParams(), {"adam.weight_decay": None}),
        (rlnb.MuonParams(learning_rate=0.02), {"adam": {"eps": None, "beta1": None}}),
    ],
)
def test_an_ablation_change_that_sends_only_an_empty_group_is_refused_as_the_baseline(tmp_path, base, change):
    """``{"adam": {"learning_rate": None}}`` on ``MuonParams()`` sends ``{'adam': {}}``: an Adam group that overrides
    nothing, so the session's defaults apply as without it (every field of AdamParams is optional). It differed from
    the base's body as a dict and ran the baseline again under another name."""
    said = r"changes\['same'\] .* sends the same params as 'baseline': .*'adam': \{\}.*, and an empty group sets"
    with pytest.raises(ValueError, match=said):
        ablate(base, {"higher": {"learning_rate": 1e-2}, "same": change}, seeds=[0], steps=1, runs_dir=tmp_path,
               progress=False)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"variants": ["a", "b"]}, "variants"),
     ({"search": "optuna", "n_trials": 2, "space": {"learning_rate": (1e-4, 1e-2)}}, "search, space, n_trials"),
     ({"configs": [{"learning_rate": 1e-2}]}, "configs")],
)  # fmt: skip
def test_sweeps_keywords_that_ablate_sets_itself_are_refused_naming_ablate(tmp_path, kwargs, named):
    """``variants=`` was "sweep() got multiple values for keyword argument 'variants'", and ``search='optuna'``
    "search='optuna' takes a space={...}, not configs", though the caller gave no configs."""
    with pytest.raises(TypeError, match=rf"ablate takes no {named}: it runs the baseline and each of changes="):
        ablate(BASE, {"higher": {"learning_rate": 1e-2}}, seeds=[0], steps=1, runs_dir=tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []
