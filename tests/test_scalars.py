"""``rlnb._input.scalars.scalar``: numpy's and torch's 0-d values are the Python scalars they hold; any other object
that only looks like one (a ``shape`` of ``()`` and an ``item``) is never called, so a field refuses it by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlnb
from rlnb._input.checks import check_bool
from rlnb._input.scalars import scalar
from rlnb.errors import InvalidParams


class LooksScalar:
    """A 0-d look-alike whose ``item()`` raises (it could as well hang)."""

    shape = ()

    def item(self):
        raise RuntimeError("item() was called")


def test_numpy_and_torch_scalars_are_the_python_values_they_hold():
    got = [
        scalar(v) for v in (np.int64(8), np.float32(0.5), np.True_, np.array(3), torch.tensor(0.25), torch.tensor(True))
    ]
    assert got == [8, 0.5, True, 3, 0.25, True]
    assert [type(v) for v in got] == [int, float, bool, int, float, bool]
    arr = np.array([1, 2])
    assert scalar(arr) is arr and scalar("x") == "x"


def test_a_look_alike_scalar_in_a_params_field_is_refused_naming_the_field():
    with pytest.raises(InvalidParams, match="learning_rate"):
        rlnb.AdamParams(learning_rate=LooksScalar())


def test_a_tensor_with_no_value_to_read_is_refused_naming_the_field():
    """A 0-d tensor on the meta device: its ``item()``'s RuntimeError escaped the field's error."""
    with pytest.raises(InvalidParams, match="learning_rate"):
        rlnb.AdamParams(learning_rate=torch.tensor(1e-3, device="meta"))
    with pytest.raises(ValueError, match="record must be True or False"):
        check_bool("record", torch.tensor(True, device="meta"))


def test_a_look_alike_bool_flag_is_refused_naming_the_flag_not_called():
    with pytest.raises(ValueError, match="record must be True or False"):
        check_bool("record", LooksScalar())
    assert check_bool("record", np.True_) is True and check_bool("record", torch.tensor(False)) is False
