"""``History.on_read``: told on each table read, and with nobody subscribed (most runs) not called at all."""

from __future__ import annotations

import sys

from rlnb.history import History
from rlnb.history.listeners import Listeners


def _tells(read) -> int:
    """How many times ``Listeners.tell`` ran while ``read()`` did."""
    told = [0]

    def count(frame, event, arg):
        if event == "call" and frame.f_code is Listeners.tell.__code__:
            told[0] += 1

    sys.setprofile(count)
    try:
        read()
    finally:
        sys.setprofile(None)
    return told[0]


def test_reading_a_table_tells_each_on_read_callback_and_calls_nothing_with_none_subscribed():
    history = History(config={})
    history.log(1, reward=0.5)
    assert _tells(lambda: (history.df, history.steps, history.logged)) == 0
    heard: list[None] = []
    stop = history.on_read(heard.append)
    assert _tells(lambda: (history.df, history.steps, history.logged)) == 3
    assert heard == [None, None, None]
    stop()
    assert _tells(lambda: history.df) == 0 and len(heard) == 3


def test_a_listener_that_raises_ctrl_c_or_exit_leaves_the_others_told_then_raises_it():
    """A callback's ``KeyboardInterrupt`` (Ctrl-C while a live view drew) or ``sys.exit()`` stopped the telling:
    every listener after it (a sink, a live view attached later) missed that record for good."""
    import pytest

    for raised in (KeyboardInterrupt, SystemExit):
        listeners: Listeners[int] = Listeners()
        heard: list[int] = []

        def stop(item: int, raised=raised) -> None:
            raise raised

        listeners.add(stop)
        listeners.add(heard.append)
        with pytest.raises(raised):
            listeners.tell(7)
        assert heard == [7]
