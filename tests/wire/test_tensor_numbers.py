"""A tensor's data list (``TensorData``, ``GradientTensor``) built by hand takes Python ints and floats only, as the
scalar fields do (``NUMBER_ONLY``): pydantic's strict float took any element with ``__float__`` (a 0-d tensor, a
numpy float32, a ``Decimal``), at no Python call per element; ``GradientTensor``'s int64 data is checked in int64's
range, in ``TensorData``'s words."""

import json
import re
from decimal import Decimal

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from rlnb import samples, wire
from tests.support.calls import python_calls

NO_NUMBERS = {
    "tensor([0.5])": lambda: torch.tensor([0.5]),
    "0-d tensor": lambda: torch.tensor(0.5),
    "np.float32": lambda: np.float32(0.5),
    "Decimal": lambda: Decimal("0.5"),
}
BUILDS = {
    "TensorData": lambda data: wire.TensorData(data=data, dtype="float32"),
    "GradientTensor": lambda data: wire.GradientTensor(data=data),
}


@pytest.mark.parametrize("build", BUILDS.values(), ids=BUILDS)
@pytest.mark.parametrize("value", NO_NUMBERS.values(), ids=NO_NUMBERS)
@pytest.mark.parametrize("first", [1.0, 1], ids=["after-a-float", "after-an-int"])
def test_a_data_element_that_is_no_python_number_is_refused_naming_it(build, value, first):
    with pytest.raises(ValidationError) as raised:
        build([first, value()])
    assert [(e["loc"], e["type"]) for e in raised.value.errors()] == [(("data", 1), "float_type")]


@pytest.mark.parametrize("build", BUILDS.values(), ids=BUILDS)
def test_python_numbers_numpy_float64_and_json_are_taken_as_before(build):
    held = build([1, 2.5, np.float64(0.25)]).data
    assert held == [1.0, 2.5, 0.25] and all(type(v) is float for v in held)
    with pytest.raises(ValidationError, match="valid number"):
        build([1.0, True])
    model = type(build([1.0]))
    body = {"data": [1, 2.5], "dtype": "float32" if model is wire.TensorData else None}
    assert model.model_validate_json(json.dumps(body)).data == [1.0, 2.5]


@pytest.mark.parametrize("build", BUILDS.values(), ids=BUILDS)
def test_the_element_check_makes_no_python_call_per_element(build):
    """Counted at two sizes: the same number of Python calls for 10 elements and for 10,000 (ints: the item path)."""
    assert python_calls(lambda: build(list(range(10)))) == python_calls(lambda: build(list(range(10_000))))


def test_rlnbs_entry_points_take_numpy_arrays_and_tensors_as_before():
    sample = samples.cross_entropy(np.array([1, 2, 3]), weights=torch.tensor([0.5, 1.0, 1.0]))
    assert sample.loss_fn_inputs["weights"].data == [1.0, 1.0]
    sample = samples.policy([1, 2], np.array([3, 4]), np.array([-0.5, -1.0], dtype=np.float32), np.float32(0.5))
    assert sample.loss_fn_inputs["advantages"].data == [0.0, 0.5, 0.5]
    assert sample.loss_fn_inputs["logprobs"].data == [0.0, -0.5, -1.0]


@pytest.mark.parametrize(
    ("data", "said"), [([1, 0.5, -2], "data[1] is 0.5"), ([1, 2.0**63], "data[1] is 9.223372036854776e+18")]
)
def test_an_int64_gradient_is_checked_in_int64s_range_in_tensor_datas_words(data, said):
    """``2.0**63`` was taken as an int64 gradient, and a fraction was said in words of its own."""
    with pytest.raises(
        ValidationError, match=re.escape(said) + ".*, but dtype D_TYPE_INT64 holds integers in int64's range only"
    ):
        wire.GradientTensor(data=data, dtype="D_TYPE_INT64")
    assert wire.GradientTensor(data=[1, 0, -(2**53)], dtype="D_TYPE_INT64").data == [1.0, 0.0, -(2.0**53)]
