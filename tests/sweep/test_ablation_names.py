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
