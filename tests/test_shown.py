"""``rlnb._shown.shown``, the one way an error message shows a value: a value whose ``repr()`` raises (or an int too
long for ``str``) is shown by its type, and the error that shows it is still the field's."""

from __future__ import annotations

import pytest

import rlnb
from rlnb._options import check_bool, check_int
from rlnb._shown import shown
from rlnb.errors import InvalidParams


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


def test_a_value_whose_repr_raises_is_shown_by_its_type():
    assert shown(BadRepr()) == "<BadRepr whose repr() failed>"
    assert shown(10**5000) == "<int whose repr() failed>"  # past str()'s 4,300 digits: a ValueError of its own


def test_a_field_given_such_a_value_is_refused_naming_the_field():
    """What the repr raised replaced the field's error: ``RuntimeError: repr exploded``, or for ``10**5000`` a
    ValueError about ``sys.set_int_max_str_digits()`` that named no option."""
    with pytest.raises(InvalidParams, match="learning_rate = <BadRepr whose repr"):
        rlnb.AdamParams(learning_rate=BadRepr())
    with pytest.raises(ValueError, match="record must be True or False, got <BadRepr"):
        check_bool("record", BadRepr())
    with pytest.raises(ValueError, match="steps must be an integer in \\[1, 10\\], got <int whose repr"):
        check_int("steps", 10**5000, low=1, high=10)
