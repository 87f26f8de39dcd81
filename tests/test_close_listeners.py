"""``Session.on_close`` with the callbacks a notebook gives it: a lambda or a function defined inside another is heard,
a bound method is held only as long as its object lives."""

from __future__ import annotations

import gc
import weakref

import rlnb
from rlnb.testing import FakeBackend


def test_a_lambda_given_to_on_close_is_called_when_the_session_closes():
    """It was held weakly, so it was gone once ``on_close(...)`` returned and never called, in silence."""
    session = rlnb.Session(FakeBackend("adam"), record=False)
    heard: list[str] = []
    session.on_close(lambda: heard.append("lambda"))

    def subscribe() -> None:  # a function made inside another (a cell's helper), gone with its frame
        def closed() -> None:
            heard.append("nested")

        session.on_close(closed)

    subscribe()
    gc.collect()
    session.close()
    assert heard == ["lambda", "nested"]


def test_a_bound_method_is_held_weakly_and_a_function_let_go_once_told():
    """A listener's object (a RunPanel) is kept alive by no session (a guard); a function is kept until the session
    has told it, or it is unsubscribed (it was dropped at once), then let go."""
    session = rlnb.Session(FakeBackend("adam"), record=False)

    class Listener:
        def closed(self) -> None:
            pass

    listener = Listener()
    gone = weakref.ref(listener)
    session.on_close(listener.closed)
    del listener
    gc.collect()
    assert gone() is None

    def told() -> None:
        pass

    def unsubscribed() -> None:
        pass

    seen = weakref.ref(told), weakref.ref(unsubscribed)
    session.on_close(told)
    session.on_close(unsubscribed)()
    del told, unsubscribed
    assert len(session._close_listeners) == 1
    session.close()
    gc.collect()
    assert [ref() for ref in seen] == [None, None]
