"""A remote submission returns at once (issue 17 §2): the POSTs go out from the backend's sender thread, in
submission order, outside the session's lock; a refused POST fails its own operation only."""

import socket
import threading
import time
import warnings

import httpx
import pytest

import rlnb
from rlnb.remote import sender
from rlnb.remote.client import RetryPolicy
from tests.support.fake_api import BASE, FAST_POLL, KEY, OPS, FakeAPI, error
from tests.support.hostile import Loopback, write_response

QUICK = RetryPolicy(max_retries=2, initial_delay=0.01, max_delay=0.05)
LRS = [(i + 1) * 1e-5 for i in range(5)]
REFUSED_LR = LRS[2]


def stalling(fake: FakeAPI, release: threading.Event, arrived: list[float]):
    """Serve ``fake``, holding every operation POST until ``release`` is set; ``arrived`` lists each POST's
    learning rate in the order the server got them. The third step's POST is refused (400) with the
    Authorization header echoed into the message."""

    def answer(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
        if request.method == "POST" and "/operations/optim-step" in request.url.path:
            lr = httpx.Response(200, content=request.content).json()["adam_params"]["learning_rate"]
            arrived.append(lr)
            while not release.wait(0.05):
                if stopping.is_set():
                    return
            if lr == REFUSED_LR:
                auth = request.headers["authorization"]
                write_response(conn, error(400, f"learning_rate refused for {auth}", "adam_params.learning_rate"))
                return
        write_response(conn, fake(request))

    return answer


def arrival(arrived: list[float], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not arrived:
        assert time.monotonic() < deadline, "no POST reached the server"
        time.sleep(0.01)


@pytest.mark.slow
def test_submissions_return_at_once_while_posts_stall_and_keep_their_order():
    fake = FakeAPI()
    release = threading.Event()
    arrived: list[float] = []
    with Loopback(stalling(fake, release, arrived), max_connections=500) as server:
        session = rlnb.connect(
            server.url, api_key=KEY, ready_timeout=10, retry=QUICK, deadline=30, poll_min=0.005, poll_max=0.05
        )
        lrs = LRS
        ops = [session.optim_step(rlnb.AdamParams(learning_rate=lr)) for lr in lrs]  # returned: no POST waited on
        arrival(arrived)
        time.sleep(0.2)
        assert arrived == lrs[:1] and not any(op.done() for op in ops)  # one POST in flight, the rest queued
        release.set()
        with pytest.raises(rlnb.OperationFailed) as info:
            ops[2].result(timeout=30)
        others = [op.result(timeout=30) for i, op in enumerate(ops) if i != 2]
        session.close()
    assert arrived == lrs  # in submission order, one at a time
    assert [int(r.step) for r in others] == [1, 2, 3, 4]
    assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
    assert "learning_rate refused for Bearer ***" in info.value.message and "400" in info.value.message
    assert KEY not in info.value.message
    statuses = [rec.status for rec in session.history.records]
    assert statuses == [OPS + "COMPLETED"] * 2 + [OPS + "FAILED"] + [OPS + "COMPLETED"] * 2


@pytest.mark.slow
def test_close_fails_what_was_never_sent_and_does_not_wait_for_a_stalled_post_past_its_grace(monkeypatch):
    monkeypatch.setattr("rlnb.remote.backend.CLOSE_GRACE", 0.5)
    fake = FakeAPI()
    release = threading.Event()
    arrived: list[float] = []
    with Loopback(stalling(fake, release, arrived), max_connections=500) as server:
        session = rlnb.connect(server.url, api_key=KEY, ready_timeout=10, retry=QUICK, deadline=30, record=False)
        ops = [session.optim_step(rlnb.AdamParams(learning_rate=lr)) for lr in LRS[:3]]
        arrival(arrived)
        start = time.monotonic()
        session.close()
        took = time.monotonic() - start
        release.set()
    assert took < 25  # the stop is answered; the stalled POST gets its grace (0.5 s), not the 30 s deadline
    for op in ops:
        with pytest.raises(rlnb.OperationFailed) as info:
            op.result(timeout=1)
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
    assert "being sent" in ops[0].error.message and "before this was sent" in ops[1].error.message


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (rlnb.BadRequestError("m", method="POST", url="u", status_code=400), "INVALID_INPUT"),
        (rlnb.RateLimitError("m", method="POST", url="u", status_code=429), "RESOURCE_EXHAUSTED"),
        (rlnb.NotFoundError("m", method="POST", url="u", status_code=404), "SESSION_NOT_ACTIVE"),
        (rlnb.InternalServerError("m", method="POST", url="u", status_code=503), "INTERNAL_ERROR"),
        (rlnb.AuthenticationError("m", method="POST", url="u", status_code=401), None),
        (rlnb.APITimeoutError("m"), "TIMEOUT"),
        (rlnb.APIConnectionError("m"), None),
        (
            rlnb.BadRequestError(
                "m",
                method="POST",
                url="u",
                status_code=400,
                body={"error": {"code": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}},
            ),
            "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS",
        ),  # fmt: skip
    ],
)
def test_a_refused_post_gets_the_api_errors_code(exc, code):
    expected = None if code is None else rlnb.wire.error_code(code)
    assert sender.refusal_code(exc) == expected


def test_a_queue_of_unsent_bodies_past_the_threshold_warns_once_per_session(monkeypatch):
    """trem 7: a loop that submits faster than the server takes its POSTs held every body, without a word (500
    batches of 0.5 MB: 250 MB). Submissions still return at once; past ``QUEUE_WARN_BYTES`` queued the session
    warns, once, naming the count and the bytes and ``session.wait()``; after a ``wait()`` the queue drains."""
    fake, release, arrived = FakeAPI(), threading.Event(), threading.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and "/operations/" in request.url.path:
            arrived.set()
            assert release.wait(30)  # a server that takes each POST only when the test lets it
        return fake(request)

    monkeypatch.setattr(sender, "QUEUE_WARN_BYTES", 1000)  # an optim-step body: 39 bytes
    session = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(slow), record=False, **FAST_POLL)
    warned: list[tuple[int, str]] = []  # (how many were queued, the message)
    try:
        for _ in range(2):
            release.clear()
            arrived.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ops = [session.optim_step(rlnb.AdamParams(learning_rate=1e-5))]
                assert arrived.wait(10)  # its POST is held: the next ones queue behind it
                for i in range(1, 60):
                    ops.append(session.optim_step(rlnb.AdamParams(learning_rate=1e-5)))
                    warned += [(i, str(w.message)) for w in caught if w.filename == __file__]  # the user's line
                    caught.clear()
                assert not any(op.done() for op in ops)  # each returned at once, none sent but the first
            release.set()
            session.wait(timeout=30)
    finally:
        release.set()
        session.close()
    assert len(warned) == 1, warned  # once per session, not once per queue that grew again after a wait()
    at, message = warned[0]
    assert 1 < at < 59 and f"has {at} operations (" in message and "queued and not sent yet" in message
    assert "Call session.wait() now and then" in message and "QUEUE_WARN_BYTES" in message
    assert [int(op.result().step) for op in ops] == list(range(61, 121))
