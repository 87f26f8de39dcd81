"""``builder.lr_finder.options`` set whole to something that is no dict of ``lr_find``'s options."""

import pytest

from rlnb.widgets import OptimizerBuilder


@pytest.mark.parametrize("options", [None, [("steps", 5)], "steps=5"])
def test_options_that_are_no_dict_are_refused_where_they_are_set(options):
    """``lr_finder.options = None`` was taken; a click on Find LR then raised ``AttributeError: 'NoneType' object has
    no attribute 'get'`` into the kernel's log only: no line, no ``.error``, the button doing nothing."""
    b = OptimizerBuilder()
    with pytest.raises(TypeError, match=r"lr_finder\.options must be a dict of lr_find's options, such as "):
        b.lr_finder.options = options
    assert b.lr_finder.options == {"steps": 30}
    b.close()


def test_a_dict_of_options_is_taken_and_used_by_the_click():
    """Guard: a dict set whole is what the next test runs with (here refused by ``lr_find``, saying so)."""
    b = OptimizerBuilder()
    b.lr_finder.options = {"steps": 0}
    b.lr_finder.button.click()
    assert b.lr_finder.join(60)
    assert "steps must be an integer in [5, 10000], got 0" in str(b.lr_finder.error)
    assert "steps must be an integer in [5, 10000], got 0" in b.lr_finder.status.value
    b.close()
