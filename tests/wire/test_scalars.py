"""What passes for an int or a bool on the wire is told by type, never by ``==`` or by calling the value: an object
that only claims to be one is refused with the field's own error."""

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from rlnb import wire
from tests.support.calls import python_calls


class _SaysItIsInt(type):
    """A metaclass whose classes say they equal ``int`` (``==``), as ``list.count`` asked them."""

    def __eq__(cls, other):
        return other is int or type.__eq__(cls, other)

    __hash__ = type.__hash__


class Impostor(metaclass=_SaysItIsInt):
    """No int, but ordered like one: past the type test it passed the range test too, and was kept as a token."""

    __lt__ = __gt__ = lambda self, other: False
    __le__ = __ge__ = lambda self, other: True


def test_a_value_whose_type_only_says_it_equals_int_is_refused_as_a_token_naming_it():
    """``wire.only`` compared types with ``==`` (``list.count``): ``Impostor`` passed as an int and was kept."""
    assert type(Impostor()) == int and not wire.only([1, Impostor()], int)  # noqa: E721 - the impostor's claim
    with pytest.raises(ValidationError) as raised:
        wire.EncodedText(tokens=[1, Impostor()])
    assert [e["loc"] for e in raised.value.errors()] == [("tokens", 1)]


def test_only_stays_a_test_without_a_python_call_per_item():
    """It is on the sample path: a Python step per token was most of a big batch's cost."""
    short, long = list(range(40)), list(range(4000))
    assert wire.only(long, int) and not wire.only([*long, True], int) and wire.only([], int)
    assert python_calls(lambda: wire.only(long, int)) == python_calls(lambda: wire.only(short, int))


class _Item:
    """A 0-d value (``shape == ()``) whose ``item()`` is no bool's: it raises, or gives text."""

    shape = ()

    def __init__(self, gives):
        self.gives, self.called = gives, False

    def item(self):
        self.called = True
        if isinstance(self.gives, Exception):
            raise self.gives
        return self.gives


@pytest.mark.parametrize("gives", [RuntimeError("no item"), "yes"], ids=["raises", "text"])
def test_a_token_whose_item_is_no_bool_gets_the_fields_error_and_item_is_never_called(gives):
    """``_a_bool`` called ``item()`` on any 0-d object: its ``RuntimeError`` escaped as itself, not a 400-style
    field error, and an ``item()`` that hung hung the check."""
    value = _Item(gives)
    with pytest.raises(ValidationError) as raised:
        wire.EncodedText(tokens=[1, value])
    assert [e["loc"] for e in raised.value.errors()] == [("tokens", 1)] and not value.called


@pytest.mark.parametrize(
    "flag",
    [True, np.True_, np.array(False), torch.tensor(True), torch.nn.Parameter(torch.tensor(True), requires_grad=False)],
    ids=["bool", "np.True_", "0-d array", "0-d tensor", "0-d parameter"],
)
def test_bools_of_python_numpy_and_torch_are_refused_as_tokens(flag):
    with pytest.raises(ValidationError, match="expected an integer, got a bool"):
        wire.EncodedText(tokens=[1, flag])


def test_numbers_of_numpy_and_torch_are_no_bools():
    tokens = [np.int64(5), np.array(6), torch.tensor(7), np.array([8])[0]]
    assert wire.EncodedText(tokens=tokens).tokens == [5, 6, 7, 8]
