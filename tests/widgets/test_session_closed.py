"""A RunPanel whose session is closed while the panel is idle (in another cell, a ``with`` block's end): it said
"step N · ready" with Step, Run N and Find LR enabled until a click was refused. Now the session tells its
``on_close`` listeners, held weakly, and the panel says so and turns them off at once. Real widgets, on
``FakeBackend``."""

import gc
import html
import logging
import re
import threading
import weakref

import pytest

import rlnb
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

DEADLINE = 60.0


def text(widget) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", widget.value))


def test_a_panel_idle_on_a_session_closed_elsewhere_says_so_and_turns_its_buttons_off_at_once():
    session = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(session, every=0.05)
    assert not panel.step_button.disabled and text(panel.status).endswith("ready")
    session.close()  # another cell; no click, no edit of the form
    assert panel.step_button.disabled and panel.run_button.disabled and panel.builder.lr_finder.button.disabled
    assert text(panel.status) == f"session {session.id} is closed: connect a new one to train"
    assert "is closed" in text(panel.builder.lr_finder.status)
    panel.close()


def test_a_session_closed_on_another_thread_turns_the_panel_off_too():
    """A ``with`` block in a thread, a sweep's driver: the listener runs on the thread that closes the session."""
    session = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(session, every=0.05)
    closer = threading.Thread(target=session.close)
    closer.start()
    closer.join(DEADLINE)
    assert not closer.is_alive() and panel.step_button.disabled and panel.run_button.disabled
    assert text(panel.status).startswith(f"session {session.id} is closed")
    panel.close()


def test_a_closed_panel_hears_nothing_and_no_session_keeps_a_listener_alive(caplog):
    """A panel closed first unsubscribes (its closed widgets are left as they are); a listener's object that is gone
    is not called, and a listener that raises is logged while the others still hear and the session closes."""
    session = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(session, every=0.05)
    assert len(session._close_listeners) == 1
    panel.close()
    assert len(session._close_listeners) == 0

    heard = []

    class Listener:
        def closed(self):
            heard.append(self)

    kept, dropped = Listener(), Listener()
    gone = weakref.ref(dropped)
    session.on_close(kept.closed)
    session.on_close(dropped.closed)
    del dropped
    gc.collect()
    assert gone() is None  # the session did not keep it alive

    def broken():
        raise RuntimeError("a notebook's bug")

    session.on_close(broken)
    late = Listener()
    session.on_close(late.closed)
    with caplog.at_level(logging.ERROR, logger="rlnb"):
        session.close()
    assert heard == [kept, late] and session.closed
    assert "on_close listener raised" in caplog.text
    session.close()  # told once
    assert heard == [kept, late]


def test_a_listener_subscribed_after_the_close_is_called_at_once():
    """``on_close`` on a session closed already: the callback was kept and never called (only a second close said
    it), against its docstring's "called once when the session closes"."""
    session = rlnb.Session(FakeBackend())
    session.close()
    heard: list[int] = []

    def callback() -> None:
        heard.append(1)

    session.on_close(callback)
    assert heard == [1]
    session.close()
    assert heard == [1]  # once


def test_a_session_id_with_markup_is_shown_as_its_text_when_the_session_closes():
    """A session's id is the server's word (a remote one's is whatever its server answered): the closed panel's line
    put it into the status HTML raw, so an id ``<img src=x onerror=...>`` became an element of the notebook's page
    (the HTML widget sets its value as markup), where the "waits" and "not started" lines escape what they show."""
    backend = FakeBackend("adam")
    backend._info = backend._info.model_copy(update={"id": "<img src=x onerror=alert(1)>&"})
    session = rlnb.Session(backend, record=False)
    panel = RunPanel(session, every=0.05)
    session.close()
    assert "<img" not in panel.status.value and "&lt;img src=x onerror=alert(1)&gt;&amp;" in panel.status.value
    assert text(panel.status) == "session <img src=x onerror=alert(1)>& is closed: connect a new one to train"
    panel.close()
