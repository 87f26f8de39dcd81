"""A range of an integer field draws integers: ``random_search(n, newton_schulz_steps=(3, 6))`` drew floats such as
4.71, which the sweep then refused, trial by trial."""

import pytest

from rlnb.sweep import Float, random_search
from rlnb.sweep.space import dimension


def test_a_two_number_range_of_an_integer_field_draws_integers():
    steps = [c["newton_schulz_steps"] for c in random_search(4, seed=3, newton_schulz_steps=(3, 6))]
    assert sorted(steps) == [3, 4, 5, 6] and all(type(n) is int for n in steps)


@pytest.mark.parametrize("spec", [(3, 6.5), (3, 6, "log"), Float(3, 6)])
def test_a_real_range_of_an_integer_field_is_refused_naming_it(spec):
    with pytest.raises(
        ValueError, match=r"space\['newton_schulz_steps'\]: newton_schulz_steps is an integer field.*\(3, 6, 'int'\)"
    ):
        random_search(2, newton_schulz_steps=spec)


def test_a_real_field_keeps_its_real_range():
    assert isinstance(dimension("weight_decay", (0, 1)), Float)
