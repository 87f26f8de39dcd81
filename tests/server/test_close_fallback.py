"""A stop closes the session's backend on a thread of its own (``registry._close_later``): closing joins a worker
whose operation may run for minutes. When no thread could be started, the backend was closed inside the stop's
request instead, holding it (and at a server stop, past its deadline) for as long as the worker ran. Now the close
waits for the next chance of a thread (the reaper's next turn, the next stop, a server stop's wait)."""

import threading

import pytest

from rlnb import wire
from rlnb.server import registry as registry_module
from tests.support.server import DEADLINE, app_client, new_session

pytestmark = pytest.mark.slow  # each builds a model and closes it (over 1 s on a loaded machine)


@pytest.fixture
def no_close_thread(monkeypatch):
    """``Thread.start`` of a closing thread raises, as when the process runs out of threads; ``.allow()`` lifts it."""
    real, blocked = threading.Thread.start, threading.Event()
    blocked.set()

    def start(self):
        if blocked.is_set() and self.name == "rlnb-close":
            raise RuntimeError("can't start new thread")
        return real(self)

    monkeypatch.setattr(registry_module.threading.Thread, "start", start)
    blocked.allow = blocked.clear  # type: ignore[attr-defined]
    return blocked


def _hold_close(backend) -> tuple[threading.Event, threading.Event]:
    """The backend's close waits for ``release`` (a worker still running its operation); ``closed`` once it ran."""
    release, closed, real_close = threading.Event(), threading.Event(), backend.close

    def held_close():
        release.wait(DEADLINE)
        real_close()
        closed.set()

    backend.close = held_close
    return release, closed


def _within_deadline(call) -> list:
    """``[call()]`` if it returned within the test's deadline, else ``[]`` (it is left running)."""
    done: list = []
    worker = threading.Thread(target=lambda: done.append(call()), daemon=True)
    worker.start()
    worker.join(DEADLINE)
    return done


def test_a_stop_with_no_thread_to_close_on_answers_and_the_close_waits_for_one(tmp_path, no_close_thread):
    with app_client(tmp_path) as c:
        registry = c.app.state.registry
        _, sid = new_session(c)
        backend = registry.sessions[sid].backend
        release, closed = _hold_close(backend)
        answered = _within_deadline(lambda: c.post(f"/training-sessions/{sid}/stop"))
        release.set()
        assert answered and answered[0].status_code == 200, "the stop waited for the backend's close"
        assert registry.sessions[sid].backend is backend  # not closed yet: no thread to close it on
        no_close_thread.allow()
        registry.reap()  # the reaper's next turn
        assert closed.wait(DEADLINE) and registry.settle(DEADLINE)
        assert registry.sessions[sid].backend is None
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPED


def test_a_server_stop_with_no_thread_to_close_on_keeps_its_deadline(tmp_path, no_close_thread):
    with app_client(tmp_path) as c:
        registry = c.app.state.registry
        _, sid = new_session(c)
        release, closed = _hold_close(registry.sessions[sid].backend)
        stopped = _within_deadline(lambda: registry.close(timeout=0.2))
        assert stopped == [[]], "the server stop closed the backend inline, past its deadline"
        no_close_thread.allow()
        release.set()
        assert registry.settle(DEADLINE) and closed.is_set()  # settle's own retry found a thread
        assert registry.sessions[sid].backend is None
