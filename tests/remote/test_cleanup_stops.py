"""The stops that clean up after rlnb — ``close()``'s, and those undoing a ``connect`` that failed — against a
network that makes no connection: tried again for ``STOP_RECONNECT`` seconds at most, then a warning names what
may still run (and cost) remotely. Asked once, a brief blip left a paid resource running; retried through the
whole backoff, a dead server held ``close()`` 14 s."""

import logging
import re
import socket
import time

import httpcore
import httpx
import pytest

import rlnb
import rlnb.remote.backend
import rlnb.remote.start
from rlnb.remote import transport
from rlnb.remote.retry import RetryPolicy
from rlnb.remote.start import STOP_RECONNECT
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, error, quick

SESSION_STOP = r"/training-sessions/[^/]+/stop$"
RESOURCE_STOP = r"/model-resources/[^/]+/stop$"
MANY_QUICK = {"retry": RetryPolicy(max_retries=10**6, initial_delay=0.005, max_delay=0.01), "deadline": 30}
"""Retries that never run out: only the reconnect window can end the stops."""
SLACK = 5.0
"""Seconds allowed past a window: generous, so that a busy machine does not fail the test."""


class Net:
    """The fake API behind a network that refuses the requests whose path matches a pattern of ``fails``, as many
    times as it says (None: every time), with ``failure``."""

    def __init__(self, fake: FakeAPI, failure: type[httpx.TransportError] = httpx.ConnectError):
        self.fake, self.failure = fake, failure
        self.fails: dict[str, int | None] = {}
        self.refused: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        for pattern, left in self.fails.items():
            if re.search(pattern, request.url.path) and left != 0:
                self.fails[pattern] = None if left is None else left - 1
                self.refused.append(request)
                raise self.failure("refused", request=request)
        return self.fake(request)

    def paths(self) -> list[str]:
        return [r.url.path for r in self.refused]


def connect(net: Net, **options) -> rlnb.Session:
    return rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(net), ready_timeout=5, record=False,
                        **FAST_POLL, **options)  # fmt: skip


def warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "may still be running remotely" in r.getMessage()]


def stopped(fake: FakeAPI) -> list[str]:
    return [v["status"] for v in fake.sessions.values()] + [v["status"] for v in fake.resources.values()]


STOPPED = ["TRAINING_SESSION_STATUS_STOPPED", "MODEL_RESOURCES_STATUS_STOPPED"]


@pytest.mark.parametrize("failure", [httpx.ConnectError, httpx.ConnectTimeout])
def test_close_tries_its_stops_again_through_a_network_blip(failure, caplog):
    fake = FakeAPI(ready_after=1)
    net = Net(fake, failure)
    s = connect(net, **quick({}))
    net.fails = {SESSION_STOP: 2, RESOURCE_STOP: 2}
    s.close()
    assert stopped(fake) == STOPPED
    assert len(net.refused) == 4 and not warned(caplog)


@pytest.mark.parametrize("failure", [httpx.ConnectError, httpx.ConnectTimeout])
def test_close_against_a_dead_server_stops_trying_with_its_window_and_says_what_may_still_run(
    failure, caplog, monkeypatch
):
    monkeypatch.setattr(rlnb.remote.backend, "STOP_RECONNECT", 0.3)
    fake = FakeAPI(ready_after=1)
    net = Net(fake, failure)
    s = connect(net, **MANY_QUICK)
    sid, rid = s.id, s.backend.resource.id
    net.fails = {"": None}  # from now on no connection can be made
    began = time.monotonic()
    with pytest.raises(rlnb.APIConnectionError, match=r"stop: .*; its time to reconnect passed"):
        s.close()
    assert time.monotonic() - began < 0.3 + SLACK
    assert len(net.refused) > 2 and set(net.paths()) == {f"/v1/rl/training-sessions/{sid}/stop"}  # no resource stop
    said = warned(caplog)
    assert len(said) == 1 and f"session {sid} and model resource {rid}" in said[0]
    assert f"stop_session({sid!r})" in said[0]  # how to stop it later


@pytest.mark.slow
def test_close_against_a_dead_server_gives_up_within_stop_reconnect_with_the_default_backoff(caplog):
    fake = FakeAPI(ready_after=1)
    net = Net(fake)
    s = connect(net, retry=RetryPolicy(max_retries=100))
    net.fails = {"": None}
    began = time.monotonic()
    with pytest.raises(rlnb.APIConnectionError, match="its time to reconnect passed"):
        s.close()
    assert time.monotonic() - began < STOP_RECONNECT + SLACK
    assert len(net.refused) >= 3 and len(warned(caplog)) == 1


def test_close_still_retries_a_stop_the_server_answers_with_a_503():
    """Only a connection that cannot be made has the window: a server that answers is asked on."""
    fake = FakeAPI(ready_after=1)
    rid = fake.add_resource({"adam": {}})
    busy = [error(503, "busy")] * 2

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stop") and busy:
            return busy.pop()
        return fake(request)

    s = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid,
                     ready_timeout=5, record=False, **FAST_POLL, **quick({}))  # fmt: skip
    s.close()
    assert [v["status"] for v in fake.sessions.values()] == ["TRAINING_SESSION_STATUS_STOPPED"]


def test_close_whose_resource_stop_cannot_connect_says_the_resource_may_still_run(caplog):
    """The session stopped, then the network went: the resource stop's error was raised with no word that the
    paid resource may still run, nor how to stop it."""
    fake = FakeAPI(ready_after=1)
    net = Net(fake)
    s = connect(net, **quick({}))
    rid = s.backend.resource.id
    net.fails = {RESOURCE_STOP: None}
    with pytest.raises(rlnb.APIConnectionError):
        s.close()
    assert stopped(fake) == ["TRAINING_SESSION_STATUS_STOPPED", "MODEL_RESOURCES_STATUS_READY"]
    said = warned(caplog)
    assert (
        len(said) == 1
        and f"model resource {rid} at" in said[0]
        and f"stop_model_resources({rid!r}, force=True)" in said[0]
    )


def failing_start(net: Net, then: dict[str, int | None]):
    """``net``'s handler, answering the new session's first GET 400 (``connect`` fails and undoes its start), the
    network refusing as ``then`` says from there on."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and re.search(r"/training-sessions/[^/]+$", request.url.path):
            net.fails = then
            return error(400, "no")
        return net(request)

    return handler


def test_a_failed_start_tries_its_stops_again_through_a_network_blip(caplog):
    fake = FakeAPI(ready_after=2)
    net = Net(fake)
    handler = failing_start(net, {SESSION_STOP: 2, RESOURCE_STOP: 2})
    with pytest.raises(rlnb.BadRequestError):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), ready_timeout=5, **FAST_POLL,
                     **quick({}))  # fmt: skip
    assert stopped(fake) == STOPPED
    assert len(net.refused) == 4 and not warned(caplog)


def test_a_failed_start_on_a_dead_server_shares_one_window_between_its_stops(caplog, monkeypatch):
    """The session's stop tries until the window ends; the resource's is then sent once or twice, in what is left of
    it (undoing a start used to hold its error back 28 s, each stop through the whole backoff)."""
    monkeypatch.setattr(rlnb.remote.start, "STOP_RECONNECT", 0.3)
    fake = FakeAPI(ready_after=2)
    net = Net(fake)
    handler = failing_start(net, {"": None})
    began = time.monotonic()
    with pytest.raises(rlnb.BadRequestError):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), ready_timeout=5, **FAST_POLL,
                     **MANY_QUICK)  # fmt: skip
    assert time.monotonic() - began < 0.3 + SLACK
    (sid,), (rid,) = fake.sessions, fake.resources
    session, resource = f"/v1/rl/training-sessions/{sid}/stop", f"/v1/rl/model-resources/{rid}/stop"
    paths = net.paths()
    sessions = paths.count(session)
    assert sessions > 2 and paths == [session] * sessions + [resource] * (len(paths) - sessions)
    assert 1 <= len(paths) - sessions <= 3  # what was left of the window: a try or two
    said = warned(caplog)
    assert len(said) == 2 and sid in said[0] and rid in said[1]


def test_a_retry_connects_by_the_reconnect_window_and_reads_by_the_deadline_only():
    """``DeadlineTransport`` bounds a retry's connecting by the window (a server that drops connections cannot
    stretch it by a connect timeout per try), and nothing else: the stop's answer is read in full."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    net = transport._Backend(httpcore.SyncBackend())
    with server, transport.deadline(None, connect_by=time.monotonic() - 1):
        with pytest.raises(httpcore.ConnectTimeout):
            net.connect_tcp("127.0.0.1", port, timeout=5)
        with transport.deadline(time.monotonic() + 30):
            stream = net.connect_tcp("127.0.0.1", port, timeout=5)
        peer, _ = server.accept()
        with peer:
            peer.sendall(b"ok")
            with transport.deadline(time.monotonic() + 30, connect_by=time.monotonic() - 1):
                assert stream.read(2, timeout=5) == b"ok"
        stream.close()


def test_a_close_that_reaches_no_server_names_the_resources_stop_too(caplog):
    """The warning said "could not stop session S and model resource M" and gave only ``stop_session('S')``, which
    leaves the resource running (and paid) until its inactive_timeout."""
    fake = FakeAPI(ready_after=1)
    down = {"now": False}

    def handler(request: httpx.Request) -> httpx.Response:
        if down["now"]:
            raise httpx.ConnectError("Connection refused", request=request)
        return fake(request)

    s = rlnb.connect(BASE, api_key=KEY, base_model="org/model-a", transport=httpx.MockTransport(handler),
                     record=False, ready_timeout=5, **FAST_POLL, **quick({"max_retries": 0}))  # fmt: skip
    down["now"] = True
    with caplog.at_level(logging.WARNING, "rlnb"), pytest.raises(rlnb.APIError):
        s.close()
    rid, sid = s.backend.resource.id, s.backend.session_id
    assert f"stop_session({sid!r}) and .stop_model_resources({rid!r}, force=True)" in caplog.text
