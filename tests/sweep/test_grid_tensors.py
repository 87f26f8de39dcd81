"""``grid`` over a torch tensor (a notebook's ``torch.logspace(...)``): its values are plain numbers once read, and are
checked as such — a NaN, or a value listed twice, was let through (a 0-d tensor is no ``numbers.Real`` and hashes by
identity), refused only later by ``sweep`` under another name, or not at all by a grid used elsewhere."""

import pytest
import torch

from rlnb.sweep import grid


def test_a_grid_over_a_tensor_refuses_its_nan_and_its_repeats_as_a_list_does():
    with pytest.raises(ValueError, match=r"grid: learning_rate lists NaN, which is no value to try"):
        grid(learning_rate=torch.tensor([float("nan"), 1e-3]))
    with pytest.raises(ValueError, match=r"grid: learning_rate lists 0.0010000000474974513 more than once"):
        grid(learning_rate=torch.tensor([1e-3, 1e-3]))
    assert grid(learning_rate=torch.tensor([1e-3, 1e-2], dtype=torch.float64)) == [{"learning_rate": 1e-3},
                                                                                  {"learning_rate": 1e-2}]  # fmt: skip
