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
