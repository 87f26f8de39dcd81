"""A stopping server waits for the reaper's turn in progress a bounded time (``stopping.STOP_DEADLINE``), as it waits
for its sessions' operations: a turn stuck (a journal write on a hung disk, say) held the stop for ever."""

import logging
import threading
import time

from rlnb import wire
from rlnb.server import stopping
from tests.support.server import CE, DEADLINE, app_client, held, new_session, submit

FB = wire.OperationKind.FORWARD_BACKWARD


def _stick_reaper(registry, turning: threading.Event, release: threading.Event) -> None:
    """The registry's reaper turns stuck (``turning`` set, held until ``release``), returned once one has begun."""

    def stuck() -> int:
        turning.set()
        release.wait(DEADLINE)
        return 0

    registry.reap = stuck
    assert turning.wait(DEADLINE), "the reaper never took its turn"


def test_a_stop_waits_for_a_stuck_reaper_turn_no_longer_than_the_stop_deadline(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(stopping, "STOP_DEADLINE", 0.2)
    release, turning = threading.Event(), threading.Event()
    stopped = threading.Event()

    def serve_then_stop() -> None:
        with app_client(tmp_path, reap_interval=0.01) as c:
            _stick_reaper(c.app.state.registry, turning, release)
        stopped.set()

    runner = threading.Thread(target=serve_then_stop, daemon=True)
    with caplog.at_level(logging.WARNING, logger="rlnb"):
        runner.start()
        try:
            assert stopped.wait(30), "the stop waited on the stuck reaper's turn"
        finally:
            release.set()
            runner.join(DEADLINE)
    assert "the reaper's turn still runs" in caplog.text, caplog.text


def _running(c, sid: str) -> str:
    """A forward-backward submitted to ``sid`` once it runs (held: ``held``): its id."""
    op = submit(c, sid, "forward-backward", CE)["id"]
    deadline, path = time.monotonic() + DEADLINE, f"/training-sessions/{sid}/operations/forward-backward/{op}"
    while c.get(path).json()["status"] != wire.OperationStatus.RUNNING:
        assert time.monotonic() < deadline, f"{op} never ran"
        time.sleep(0.01)
    return op


def test_a_stop_says_at_once_which_running_operation_it_waits_for(tmp_path, monkeypatch, caplog):
    """A stop with an operation running waited up to 30 s in silence, then said everything at once: a person at the
    terminal saw a hung server. Once a first look finds it still running, one line names it, the deadline and the way
    out, before the wait."""
    monkeypatch.setattr(stopping, "STOP_DEADLINE", 1.0)  # past the first look (``stopping.LOOK``)
    with caplog.at_level(logging.WARNING, logger="rlnb"), held(monkeypatch, FB):
        with app_client(tmp_path) as c:
            registry = c.app.state.registry
            _, sid = new_session(c)
            op = _running(c, sid)
        said = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert said == [
        f"rlnb serve: stopping; waiting up to 1 s for the running forward-backward operation {op} of session {sid}; "
        "Ctrl-C or SIGTERM again abandons it"
    ]
    assert registry.abandoned == [
        stopping.Abandoned(f"forward-backward operation {op} of session {sid}", wire.OperationStatus.FAILED)
    ]


def test_a_stuck_reaper_turn_and_a_running_operation_share_one_stop_deadline(tmp_path, monkeypatch, caplog):
    """The stop waited ``STOP_DEADLINE`` for the reaper's turn, then ``STOP_DEADLINE`` again for the running
    operations: a minute, where the page says 30 s. The operations get what the reaper's turn left of it: here
    nothing, the operation abandoned at the first look and no wait said."""
    monkeypatch.setattr(stopping, "STOP_DEADLINE", 0.3)
    release, turning = threading.Event(), threading.Event()
    waits: list[float | None] = []
    with caplog.at_level(logging.WARNING, logger="rlnb"), held(monkeypatch, FB):
        try:
            with app_client(tmp_path, reap_interval=0.01) as c:
                registry = c.app.state.registry
                _, sid = new_session(c)
                op = _running(c, sid)
                _stick_reaper(registry, turning, release)
                settle = registry.settle
                registry.settle = lambda timeout=None, hurry=None: (waits.append(timeout), settle(timeout, hurry))[1]
        finally:
            release.set()
    assert "the reaper's turn still runs" in caplog.text and "waiting up to" not in caplog.text, caplog.text
    assert waits == [0.0]  # the deadline spent on the reaper's turn: none left for a second wait
    assert [a.what for a in registry.abandoned] == [f"forward-backward operation {op} of session {sid}"]
