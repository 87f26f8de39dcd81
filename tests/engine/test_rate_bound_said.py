"""A rate whose step passes what the weights' dtype holds is refused saying the largest rate allowed (review42c L6:
"give a smaller one", with no bound, where every other range gives its own). The bound said is the real one: it is
taken, and a rate 1% above it is refused."""

import re

import pytest

import rlnb
from rlnb.testing.fake_checks import step_limits


def largest_said(params) -> float:
    with pytest.raises(ValueError, match="is too large") as info:
        step_limits(params.resolved())
    said = re.search(r"give one <= ([0-9.e+-]+)", str(info.value))
    assert said is not None, str(info.value)
    return float(said.group(1))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda lr: rlnb.AdamParams(learning_rate=lr, weight_decay=0), "adam_params.learning_rate"),
        (lambda lr: rlnb.AdamParams(learning_rate=lr, beta1=0.999, weight_decay=0), "adam_params.learning_rate"),
        (lambda lr: rlnb.MuonParams(learning_rate=lr), "muon_params.learning_rate"),
        (lambda lr: rlnb.MuonParams(adam={"learning_rate": lr, "weight_decay": 0}), "muon_params.adam.learning_rate"),
    ],
)
def test_a_rate_too_large_for_the_weights_says_the_largest_allowed_and_that_one_is_taken(make, field):
    with pytest.raises(ValueError, match=rf"^{re.escape(field)} is too large: .* give one <= \S+"):
        step_limits(make(1e300).resolved())
    largest = largest_said(make(1e300))
    step_limits(make(largest).resolved())  # taken
    with pytest.raises(ValueError, match=re.escape(field)):
        step_limits(make(largest * 1.01).resolved())
