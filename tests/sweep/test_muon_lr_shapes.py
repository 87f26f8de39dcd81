"""``convert_muon_lr`` with no Muon matrix to weigh: the error names ``shapes`` and what it takes."""

import pytest

from rlnb.sweep import convert_muon_lr


@pytest.mark.parametrize(("shapes", "got"), [([], r"\[\]"), ((), r"\(\)")])
def test_converting_with_no_matrices_names_shapes_and_what_it_takes(shapes, got):
    """``convert_muon_lr(0.02, "original", "match_adam", [])`` said "no Muon matrices to convert for", the sentence
    cut short, naming neither ``shapes`` nor what it takes."""
    with pytest.raises(ValueError, match=rf"^shapes holds no Muon matrix to weigh the rate by: give at least one "
                                         rf"\(rows, cols\) .*, got {got}$"):  # fmt: skip
        convert_muon_lr(0.02, "original", "match_adam", shapes)
