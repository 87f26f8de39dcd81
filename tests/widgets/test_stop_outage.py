"""A RunPanel's Stop and a remote server that does not answer (``rlnb.widgets.outage``), on a remote session over the
in-memory fake of the API: a Stop ends the wait only when it came during an outage that has lasted two ticks. A Stop
pressed before one poll went unanswered (its retry answered) failed the step in flight at once, outcome unknown,
though the server completed it: a graceful Stop lost a step."""

import threading
import time

import httpx
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.widgets import outage
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick
from tests.support.gated_steps import wait_for
from tests.support.remote_panel import WINDOW, started_panel, text

pytestmark = pytest.mark.usefixtures("undrawn_live_view")

BATCH = [samples.cross_entropy(list(range(5, 30)))]


class Polls:
    """The fake API, with its operation polls made to fail (``down``) or, after ``blip(ticks)``, one attempt
    unanswered (a read timeout) and its retry answered ``ticks`` of the watcher later."""

    def __init__(self) -> None:
        self.fake = FakeAPI()
        self.fake.hold = True
        self.down = False
        self.attempts: list[str] = []
        self.blip_over = threading.Event()

    def blip(self, ticks: float) -> None:
        self.late = ticks * outage.TICK
        self.attempts = ["timeout", "late"]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and "/operations/" in request.url.path:
            if self.down:
                raise httpx.ConnectError("refused", request=request)
            if self.attempts:
                if self.attempts.pop(0) == "timeout":
                    raise httpx.ReadTimeout("timed out", request=request)
                time.sleep(self.late)  # the retry, answered late
                self.blip_over.set()
        return self.fake(request)


def _panel(polls: Polls):
    session = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(polls), ready_timeout=5, record=False,
                           poll_failure_window=WINDOW, **FAST_POLL, **quick({}))  # fmt: skip
    panel, sent = started_panel(session, BATCH, wait=60)  # POSTed: polled from now
    return session, panel, sent


def test_a_stop_before_one_unanswered_poll_lets_the_step_complete():
    polls = Polls()
    session, panel, sent = _panel(polls)
    try:
        panel.stop()  # "stopping after this step …"
        time.sleep(0.05)  # the outage begins after the Stop
        polls.blip(3)
        assert polls.blip_over.wait(30)  # the watcher saw the outage for more than two ticks, the Stop set
        time.sleep(2 * outage.TICK)
        assert sent[0].status not in (wire.OperationStatus.FAILED, wire.OperationStatus.COMPLETED)
        polls.fake.hold = False  # the server completes the step
        assert panel.join(60)
        assert sent[0].status == wire.OperationStatus.COMPLETED and sent[0].result(1).loss > 0
        assert panel.error is None, panel.error
    finally:
        panel.close(timeout=60)
        session.close()


def test_a_stop_during_an_outage_shorter_than_two_ticks_lets_the_step_complete():
    """A Stop pressed in the middle of a blip (one poll unanswered, its retry answered 0.75 s later) is one for
    the step in progress too: the watcher gives up only on an outage that has lasted two ticks (1 s)."""
    polls = Polls()
    session, panel, sent = _panel(polls)
    try:
        polls.blip(1.5)  # seen at a tick or two, never as lasting two ticks
        wait_for(lambda: session.backend.outage() is not None)
        panel.stop()
        assert polls.blip_over.wait(30)
        time.sleep(2 * outage.TICK)
        assert sent[0].status not in (wire.OperationStatus.FAILED, wire.OperationStatus.COMPLETED)
        polls.fake.hold = False
        assert panel.join(60)
        assert sent[0].status == wire.OperationStatus.COMPLETED and panel.error is None, panel.error
    finally:
        panel.close(timeout=60)
        session.close()


def test_only_a_stop_during_a_lasting_outage_ends_the_wait():
    """A Stop before the server stopped answering is kept for the step in progress, however long the outage; a
    Stop pressed while the line says the server is not answering fails the step at once, kept as failed."""
    polls = Polls()
    session, panel, sent = _panel(polls)
    try:
        panel.stop()
        time.sleep(0.05)
        polls.down = True
        wait_for(lambda: "server not answering for 2 s" in text(panel.status))
        assert "(the run fails at 600 s; Stop ends the wait)" in text(panel.status)
        assert sent[0].status not in (wire.OperationStatus.FAILED, wire.OperationStatus.COMPLETED)
        panel.stop_button.click()
        assert panel.join(30)
        assert sent[0].status == wire.OperationStatus.FAILED
        assert "stopped: TIMEOUT — rlnb stopped waiting at a Stop" in text(panel.status), text(panel.status)
    finally:
        polls.down = False
        panel.close(timeout=60)
        session.close()
