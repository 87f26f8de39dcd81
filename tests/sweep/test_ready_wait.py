"""A trial whose session is being started (its model resource or session not yet READY / RUNNING) hears its sweep's
stop through ``PollOptions.pause``: the readiness wait slept between polls, deaf to it, up to ``ready_timeout``."""

import threading

import httpx
import pytest

import rlnb
from rlnb import wire
from rlnb.errors import RlnbError
from rlnb.remote.backend import RemoteBackend
from rlnb.sweep import sweep
from tests.support.fake_api import BASE, FAST_POLL, FakeAPI, error
from tests.support.server import app_client
from tests.support.stopped_sweeps import stopped_sweep

PARAMS = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
NEVER = 10**9
"""Polls before the fake's resource gets READY: never, within a test."""


def test_a_stop_set_while_the_resource_is_not_ready_ends_the_trial_stopped_and_stops_the_resource(tmp_path):
    """A stop set while the created resource stayed PENDING waited out ``ready_timeout`` (1800 s by default)."""
    api = FakeAPI(ready_after=NEVER)
    polled = threading.Event()

    def provider(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.startswith("/v1/rl/model-resources/"):
            polled.set()
        return api(request)

    trials = stopped_sweep(PARAMS, httpx.MockTransport(provider), polled, BASE, poll_min=1.0, poll_max=1.0,
                           runs_dir=tmp_path)  # fmt: skip
    assert list(trials.status) == ["STOPPED"], trials.reason.tolist()
    assert trials.reason[0] == "stopped while waiting for a session"
    assert [r["status"] for r in api.resources.values()] == [wire.ModelResourcesStatus.STOPPED.value]


def test_a_readiness_wait_called_off_by_the_poll_pause_says_so_and_stops_what_it_created():
    api = FakeAPI(ready_after=NEVER)
    waits: list[float] = []
    with pytest.raises(RlnbError, match=r"PENDING.*called off \(PollOptions\.pause\)"):
        RemoteBackend.connect(
            BASE, transport=httpx.MockTransport(api), pause=lambda s: waits.append(s) or len(waits) > 2, **FAST_POLL
        )
    assert len(waits) == 3
    assert [r["status"] for r in api.resources.values()] == [wire.ModelResourcesStatus.STOPPED.value]


def test_a_stop_that_calls_off_a_retry_of_another_status_than_429_ends_the_trial_stopped(tmp_path):
    """A 503's ``Retry-After`` wait called off by the stop raised the 503, and the row said FAILED with it."""
    asked = threading.Event()

    def provider(request: httpx.Request) -> httpx.Response:
        asked.set()
        return httpx.Response(503, headers={"Retry-After": "60"}, json={"error": {"message": "overloaded"}})

    trials = stopped_sweep(PARAMS, httpx.MockTransport(provider), asked, BASE, runs_dir=tmp_path)
    assert list(trials.status) == ["STOPPED"], trials.reason.tolist()


def test_a_failure_of_its_own_that_comes_while_the_sweep_stops_ends_the_trial_failed_with_it(tmp_path):
    """Any error of a trial's open while its sweep stopped made the row STOPPED: a 400 that came then said nothing."""
    stop = threading.Event()

    def provider(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/v1/rl/model-resources":
            stop.set()  # the stop comes while the request is on its way; the answer is the server's own refusal
            return error(400, "base_model m is not offered", "base_model")
        return FakeAPI()(request)

    trials = sweep(PARAMS, steps=1, target=BASE, transport=httpx.MockTransport(provider), stop=stop, progress=False,
                   runs_dir=tmp_path)  # fmt: skip
    assert list(trials.status) == ["FAILED"], trials.reason.tolist()
    assert trials.reason[0].startswith("BadRequestError: ") and "is not offered" in trials.reason[0]


@pytest.mark.slow  # a real RL step on the app's model
def test_a_503_whose_retry_after_passes_the_slot_deadline_is_retried_as_the_policy_says(tmp_path):
    """The slot deadline (slot_timeout) ended every retry wait of the open: a 503 with Retry-After 0.3 and a
    slot_timeout of 0.05 made the row FAILED with the 503, which the client would have retried."""
    with app_client(tmp_path / "ckpt") as c:
        asked: list[str] = []

        def provider(request: httpx.Request) -> httpx.Response:
            if request.method == "GET":  # idempotent: a create is not resent after a 503 (it may have acted)
                asked.append(request.url.path)
            if len(asked) == 1 and request.method == "GET":
                return error(503, "overloaded", **{"Retry-After": "0.3"})
            answer = c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
            return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

        transport = httpx.MockTransport(provider)
        trials = sweep(PARAMS, steps=1, target="http://testserver", transport=transport, base_model="rlnb/tiny",
                       slot_timeout=0.05, progress=False, runs_dir=tmp_path / "runs")  # fmt: skip
    assert list(trials.status) == ["COMPLETED"], trials.reason.tolist()
    assert asked[0] == asked[1], asked  # the same request, retried
