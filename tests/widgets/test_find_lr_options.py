"""``builder.lr_finder.options`` set whole: to something that is no dict of ``lr_find``'s options, or to a dict that
names no task, on a RunPanel's builder."""

import html
import re
import threading

import pytest

import rlnb
import rlnb.sweep
from rlnb.sweep.lr.result import LRFind
from rlnb.tasks import addition_task
from rlnb.testing import FakeBackend
from rlnb.widgets import OptimizerBuilder, RunPanel

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view


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


def test_options_set_whole_on_a_panels_builder_still_probe_the_panels_task(monkeypatch):
    """``lr_finder.options = {"steps": 5}`` (the shape its own ``TypeError`` suggests) dropped the panel's task, kept
    in that dict: the test probed the digits task, and Apply would set a rate found on a task the panel does not
    train. A task the person sets there still wins."""
    probed = []
    found = LRFind([1e-3, 1e-2], [0.0, 1.0], [0.0, 1.0], 0.01, "reward", "adam", None, "steepest ascent of it")
    monkeypatch.setattr(
        rlnb.sweep, "lr_find", lambda p, s, **k: probed.append((k.get("task"), k.get("steps"))) or found
    )
    session = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(session, every=0.05)
    finder = panel.builder.lr_finder
    try:
        finder.options = {"steps": 5}
        finder.button.click()
        assert finder.join(30) and probed == [(panel.task, 5)] and "on the first_letter task" in finder.status.value
        mine = addition_task()
        finder.options = {"steps": 6, "task": mine}
        finder.button.click()
        assert finder.join(30) and probed[-1] == (mine, 6) and "on the addition task" in finder.status.value
    finally:
        panel.close()
        session.close()


def test_a_result_found_before_the_session_closed_is_said_beside_why_find_lr_waits(monkeypatch):
    """The waiting line replaced the result's words (the rate to carry to a new session), shown then in
    ``lr_finder.result`` only."""
    found = LRFind([1e-3, 1e-2], [0.0, 1.0], [0.0, 1.0], 0.01, "reward", "adam", None, "steepest ascent of it")
    monkeypatch.setattr(rlnb.sweep, "lr_find", lambda p, s, **k: found)
    session = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(session, every=0.05)
    finder = panel.builder.lr_finder
    try:
        finder.button.click()
        assert finder.join(30) and finder.result is found and "steepest ascent of it" in finder.status.value
        session.close()
        said = html.unescape(re.sub(r"<[^>]+>", "", finder.status.value))
        assert "steepest ascent of it" in said and said.endswith(f" · Find LR waits: session {session.id} is closed: "
                                                                 "connect a new one")  # fmt: skip
    finally:
        panel.close()


def test_an_exit_stops_a_builders_own_find_lr_after_its_step_as_it_stops_a_panels(monkeypatch):
    """A builder with no RunPanel: its Find LR went on while the exit closed its session under the step in progress
    (the exit stopped only the range tests of open panels)."""
    from rlnb.widgets import turns

    found = LRFind([1e-3, 1e-2], [0.0, 1.0], [0.0, 1.0], 0.01, "reward", "adam", None, "steepest ascent of it")
    began, heard = threading.Event(), []

    def lr_find(params, session, stop, **options):  # one step a tenth of a second until told to stop
        began.set()
        while not stop.wait(0.1):
            pass
        heard.append("stop")
        return found

    monkeypatch.setattr(rlnb.sweep, "lr_find", lr_find)
    b = OptimizerBuilder()
    try:
        b.lr_finder.button.click()
        assert began.wait(30) and b.lr_finder.running
        turns._stop_running_panels()
        assert heard == ["stop"] and not b.lr_finder.running
    finally:
        b.lr_finder.stop()
        b.lr_finder.join(30)
        b.close()


def test_a_misspelt_option_names_lr_finds_options_and_a_sessions_not_an_internal_class():
    """``{"stepz": 5}`` was passed on to ``connect`` and said ``LocalBackend() got unexpected keyword argument(s)``."""
    b = OptimizerBuilder("adam")
    try:
        b.lr_finder.options = {"stepz": 5}
        b.lr_finder.button.click()
        assert b.lr_finder.join(60)
        said = html.unescape(re.sub(r"<[^>]+>", "", b.lr_finder.status.value))
        assert "✗ TypeError: lr_find got unexpected keyword argument(s): stepz; its options are start_lr, " in said
        assert "and those of a local session (rlnb.connect): checkpoint_dir" in said and "LocalBackend" not in said
        assert isinstance(b.lr_finder.error, TypeError)
    finally:
        b.close()
