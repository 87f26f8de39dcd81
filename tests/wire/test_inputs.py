"""``TensorData`` and ``EncodedText`` take a list of plain numbers without a Python step per item (a big batch spent
most of its building and submitting there), and keep every rule of the item-by-item validation for the rest."""

import enum
import gc
import math
import re

import numpy as np
import pytest
from pydantic import ValidationError

from rlnb import samples, wire
from rlnb.session.bodies import sample_list
from tests.support.calls import python_calls


def test_counting_calls_leaves_out_the_finalizers_of_earlier_garbage():
    """A collection during the count ran the ``__del__`` of an earlier test's garbage: tests that compare counts at
    two sizes failed after some other files (137 calls against 134 in tests/test_prompt_ids.py), where the earlier
    file's allocations brought the next collection (every 20,000 under the root conftest) into the count."""
    finalized = []

    class Cycle:
        def __del__(self):
            finalized.append(self)

    def work():
        return [[] for _ in range(2 * gc.get_threshold()[0])]  # enough new objects for a collection on the way

    alone = python_calls(work)
    gc.disable()  # no collection while the last cycle is still named: one could move it past the young generations
    try:
        for _ in range(10):
            cycle = Cycle()
            cycle.me = cycle
        del cycle
    finally:
        gc.enable()
    assert python_calls(work) == alone
    assert len(finalized) == 10  # the garbage was there, and collected outside the count


def test_building_and_submitting_a_sample_makes_no_python_call_per_token():
    """A Python validator, serialiser or search ran once per token (``_int64``, ``_finite_list``'s generator, the
    int64 dump and more): the calls made building and submitting 4,000 tokens must be those made for 40."""
    short, long = [list(range(1, n + 1)) for n in (40, 4000)]

    def work(tokens):
        return lambda: sample_list([samples.cross_entropy(tokens, [0.0] * 10 + [1.0] * (len(tokens) - 10))])

    work(short)()  # the first run fills caches (abc's subclass checks) the others find
    assert python_calls(work(long)) == python_calls(work(short))


class Token(enum.IntEnum):
    EOS = 2


@pytest.mark.parametrize(("tokens", "message"), [
    ([1, True], "expected an integer, got a bool"),
    ([1, 2**63], "less than or equal to 9223372036854775807"),
    ([-(2**63) - 1, 1], "greater than or equal to -9223372036854775808"),
    ([1, 1.5], "expected an integer, got 1.5"),
    ([1, "x"], "expected an int64"),
])  # fmt: skip
def test_token_ids_a_plain_int_list_does_not_hold_are_still_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        wire.EncodedText(tokens=tokens)


def test_token_ids_in_other_forms_become_plain_ints_in_a_list_of_their_own():
    given = [2**63 - 1, -(2**63), 0]
    text = wire.EncodedText(tokens=given)
    assert text.tokens == given and text.tokens is not given
    for tokens in ([np.int64(5), 6], [Token.EOS, 6], ["5", 6.0], (5, 6)):
        got = wire.EncodedText(tokens=tokens).tokens
        assert got == [int(tokens[0]), 6] and {type(t) for t in got} == {int}, tokens


class Weight(float):
    pass


def test_tensor_data_keeps_its_rules_for_what_is_not_a_list_of_plain_floats():
    with pytest.raises(ValueError, match=r"data\.1\n.*valid number"):
        wire.TensorData(data=[1.0, True], dtype="float32")
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="tensor data must be finite"):
            wire.TensorData(data=[1.0, bad, 2.0], dtype="float32")
    big = wire.TensorData(data=[1e308, 1e308], dtype="float32")  # finite: only their sum is not
    assert big.data == [1e308, 1e308]
    given = [1.0, 2.5]
    for data in (given, [1, 2.5], [Weight(1.0), 2.5], [np.float64(1.0), 2.5], np.array([1.0, 2.5])):
        got = wire.TensorData(data=data, dtype="float32").data
        assert got == given and got is not given and {type(v) for v in got} == {float}, data


def test_int64_data_goes_out_as_integers_and_anything_else_as_it_is():
    tensor = wire.TensorData(data=[1, 2, 1e18, -3], dtype="int64")
    tensor.data[1:3] = [2.5, 1e20]  # set after validation (which refuses them): sent as they are, for a copy to name
    out = tensor.model_dump(warnings=False)["data"]
    assert out == [1, 2.5, 10**20, -3] and [type(v) for v in out] == [int, float, int, int]
    assert tensor.to_json_dict()["data"] == [1, 2.5, 10**20, -3]

    tensor.data[1:2] = [math.nan]  # set after validation: not turned into a number for the copy's validation
    assert math.isnan(tensor.model_dump(warnings=False)["data"][1])
    tensor.data[1:2] = [True]
    assert tensor.model_dump(warnings=False)["data"][1] is True


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([1, 2.5], "data[1] is 2.5"),
        ([3, -(2.0**64)], "data[1] is -1.8446744073709552e+19"),
        ([1e20], "data[0] is 1e+20"),
    ],
)
def test_int64_data_that_int64_cannot_hold_is_refused_naming_the_value(data, said):
    """An int64 tensor holding 2.5 was taken: ``rlnb serve`` answered 200, then the operation failed naming no value."""
    with pytest.raises(
        ValidationError, match=re.escape(f"{said}, but dtype int64 holds integers in int64's range only")
    ):
        wire.TensorData(data=data, dtype="int64")
    assert wire.TensorData(data=[0, 2.0**62, -(2.0**63)], dtype="int64").data == [0, 2.0**62, -(2.0**63)]
