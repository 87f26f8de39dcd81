"""``OptimizerBuilder.on_change`` given what is no function, or a function of the person's that raises."""

import pytest

import rlnb
from rlnb.testing import FakeBackend
from rlnb.widgets import OptimizerBuilder, RunPanel

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view


@pytest.fixture
def fake():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    yield s
    s.close()


def test_a_callback_that_is_no_function_is_refused_where_it_is_given():
    """``on_change(5)`` was taken; every later edit of the form then raised ``'int' object is not callable``."""
    b = OptimizerBuilder()
    with pytest.raises(TypeError, match=r"on_change: callback must be a function callback\(builder\), got 5"):
        b.on_change(5)
    b.adam["beta1"].value = 0.8  # no error
    assert b.valid
    b.close()


def test_a_raising_callback_leaves_the_panels_following_the_form(fake):
    """A callback of the person's that raises, given before the panel: ``RunPanel(session, b)`` raised it half made
    (its builder locked), and an edit's error skipped the callbacks after it, the panel's among them, so a form made
    invalid left Run enabled. It is a warning naming the callback; the form, the panel and other callbacks go on."""
    b = OptimizerBuilder()

    def mine(builder):
        raise RuntimeError("my callback")

    forget = b.on_change(mine)
    said = r"OptimizerBuilder\.on_change: the callback .*mine.* raised RuntimeError: my callback"
    with pytest.warns(RuntimeWarning, match=said):  # the panel is made all the same
        panel = RunPanel(fake, b)
    assert not panel.run_button.disabled and b.locked == "adam"
    with pytest.warns(RuntimeWarning, match=said):
        b.adam["beta1"].value = 1.5
    assert not b.valid and panel.run_button.disabled and panel.step_button.disabled
    forget()
    panel.close()
    b.close()
