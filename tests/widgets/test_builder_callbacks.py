"""``OptimizerBuilder.on_change`` given what is no function, or a function of the person's that raises."""

import html
import re

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


def test_a_raising_callback_is_said_in_the_forms_message_line_until_a_call_goes_through():
    """An edit made in the browser runs the callbacks in the widget's comm handler, whose warning reaches only
    JupyterLab's log console: the form said "✓ valid" and nothing else. The message line names the callback and its
    error, until the next call of the callbacks that none raises."""
    b = OptimizerBuilder("adam", expanded=True)
    broken = [True]

    def follow(builder):
        if broken[0]:
            raise ZeroDivisionError("my callback broke")

    b.on_change(follow)
    with pytest.warns(RuntimeWarning, match="my callback broke"):
        b.adam["beta1"].value = 0.8
    said = html.unescape(re.sub(r"<[^>]+>", " ", b.message.value))
    assert "✓ valid" in said and b.valid
    assert "⚠ the on_change callback follow raised ZeroDivisionError: my callback broke" in said
    broken[0] = False
    b.adam["beta1"].value = 0.85
    assert "⚠" not in b.message.value and "my callback broke" not in b.message.value
    b.close()
