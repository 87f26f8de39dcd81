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
