"""``rlnb._input.shown.shown``, the one way an error message shows a value: a value whose ``repr()`` raises (or an int
too long for ``str``) is shown by its type, and the error that shows it is still the field's."""

from __future__ import annotations

import pytest

import rlnb
from rlnb._input.checks import check_bool, check_int
from rlnb._input.shown import shown
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


def nested(depth: int, leaf: object = "hi") -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_a_value_nested_past_pythons_recursion_limit_shows_its_structure():
    """``repr`` of a list 5,000 deep is a ``RecursionError``: it was shown as ``<list whose repr() failed>``, where a
    few levels of it say what it is."""
    assert shown(nested(5000)) == "[[[[[...]]]]]"
    wide = [nested(5000)] * 30  # cut at 40, with no length: its whole repr is not known
    assert shown(wide) == "[[[[[...]]]], [[[[...]]]], [[[[...]]]], ..."
    assert shown(nested(2, 10**5000)) == "[[<int whose repr() failed>]]"  # the one value that fails, by its type
    assert shown([BadRepr(), nested(5000)], 100) == "[<BadRepr whose repr() failed>, [[[[...]]]]]"


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ([{"role": nested(5000), "content": "hi"}], r"\['role'\] must be a non-empty string .*got \[\[\[\[\[\.\.\.\]"),
        ([{"role": 10**5000, "content": "hi"}], r"\['role'\] must be a non-empty string .*got <int whose repr\(\) f"),
        ([{"role": "user", "content": BadRepr()}], r"\['content'\] must be a string .*got <BadRepr whose repr\(\) f"),
        ([{"role": "user", "content": "x" * 500}, 5], r"messages\[1\] must be a chat message .*got 5$"),
    ],
)
def test_a_chat_message_holding_a_hostile_value_is_refused_naming_the_field(messages, said):
    """The chat checks showed a value by their own ``reprlib`` rule: ``10**5000`` raised int's digit-limit
    ``ValueError`` in place of the field's, a raising repr showed as ``<BadRepr instance at 0x...>``."""
    from rlnb.text.prompts import check_messages

    with pytest.raises(ValueError, match=said):
        check_messages(messages)


def test_a_prompt_of_ids_holding_a_deep_list_is_refused_naming_the_prompt():
    """``as_prompt`` showed the item that is no token id by its whole repr: 5,000 lists deep, a ``RecursionError``."""
    from rlnb.text.codec import as_prompt

    with pytest.raises(TypeError, match=r"^prompts\[2\] must be a string, .* it holds \[\[\[\[\[\.\.\.\]\]\]\]\]$"):
        as_prompt([1, nested(5000)], "prompts[2]")
