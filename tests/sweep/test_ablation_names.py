"""``ablate``'s variant names are the keys of ``changes``: one that is no name is refused naming ``changes`` — the
error named ``variants``, an argument of ``sweep`` the caller never passed, and listed the hidden baseline."""

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
