"""What an ``InvalidParams`` says about a hostile value: a long one is cut so that the rule stays in sight, and a
schedule's factor that takes a rate out of range is named as the cause."""

import pytest

import rlnb

RATE_RULE = "must be a finite number, > 0"


@pytest.mark.parametrize("value", [[1e-3] * 10_000, "1e-3" * 1_250], ids=["list", "str"])
def test_a_long_value_is_cut_in_the_message_and_the_rule_stays_readable(value):
    """``AdamParams(learning_rate=[1e-3] * 10000)`` gave a 70 KB message, the rule at its very end."""
    with pytest.raises(rlnb.InvalidParams) as info:
        rlnb.AdamParams(learning_rate=value)
    message = str(info.value)
    assert len(message) < 600  # the value cut to 300 characters, the field and its rule
    assert message.startswith("AdamParams.learning_rate = ")
    assert f"... ({len(repr(value) if isinstance(value, list) else value)} characters) is invalid: " in message
    assert RATE_RULE in message
    assert info.value.errors[0][1] == value  # the value itself is kept whole for code that reads it


def test_a_short_value_is_shown_whole():
    with pytest.raises(rlnb.InvalidParams, match=r"^AdamParams.learning_rate = \[0.001, 0.002\] is invalid: "):
        rlnb.AdamParams(learning_rate=[1e-3, 2e-3])


@pytest.mark.parametrize(
    ("params", "factor", "gives"),
    [
        (rlnb.AdamParams(), 1e-320, r"learning_rate 0\.0001 \* 1e-320 = 0\.0"),  # its default rate
        (rlnb.MuonParams(learning_rate=0.02, adam={"learning_rate": 1e-3}), 1e-321,
         r"learning_rate 0\.02 \* 1e-321 = 2e-323, adam\.learning_rate 0\.001 \* 1e-321 = 0\.0"),
    ],
)  # fmt: skip
def test_a_factor_that_underflows_a_rate_to_0_is_named_with_the_range_the_rate_must_hold(params, factor, gives):
    """``scaled(1e-320)``: the product underflowed to 0, and the error named ``learning_rate = 0.0``, a value the user
    never gave, rather than the factor."""
    said = rf"^{type(params).__name__}\.scaled\.factor = {factor!r} is invalid: it gives {gives}, out of range"
    with pytest.raises(rlnb.InvalidParams, match=said) as info:
        params.scaled(factor)
    assert RATE_RULE in str(info.value)  # the range the scaled rate must hold
    assert info.value.errors[0][:2] == ("factor", factor)


def test_a_factor_that_takes_a_rate_past_its_weight_decay_bound_is_named():
    with pytest.raises(rlnb.InvalidParams) as info:
        rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.5).scaled(2000)
    message = str(info.value)
    assert message.startswith("AdamParams.scaled.factor = 2000 is invalid: it gives learning_rate 0.001 * 2000 = 2.0")
    assert "learning_rate * weight_decay must be < 1, got 2 * 0.5 = 1" in message
