"""``rlnb.samples``: the helpers that build wire samples refuse what the wire cannot carry, naming the argument."""

import math

import pytest

from rlnb import samples


@pytest.mark.parametrize(("build", "name", "value"), [
    (lambda: samples.cross_entropy([1, 2, 3], [1.0, math.nan, 1.0]), "weights", "nan"),
    (lambda: samples.policy([1, 2], [3, 4], [math.nan, -1.0], 1.0), "sampler_logprobs", "nan"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], math.inf), "advantage", "inf"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], [1.0, -math.inf]), "advantage", "-inf"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], 1.0, [-1.0, math.inf]), "reference_logprobs", "inf"),
])  # fmt: skip
def test_non_finite_values_are_refused_naming_the_argument(build, name, value):
    with pytest.raises(ValueError, match=f"^{name} must be finite numbers, got {value}$"):
        build()


def test_finite_values_pass_through():
    s = samples.policy([1, 2], [3, 4], [-1.5, -0.5], [2.0, -1.0], [-1.0, -2.0])
    x = s.loss_fn_inputs
    assert x["logprobs"].data == [0.0, -1.5, -0.5] and x["advantages"].data == [0.0, 2.0, -1.0]
    assert x["reference_logprobs"].data == [0.0, -1.0, -2.0] and x["mask"].data == [0, 1, 1]
