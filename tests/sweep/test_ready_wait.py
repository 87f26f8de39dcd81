"""A trial whose session is being started (its model resource or session not yet READY / RUNNING) hears its sweep's
stop through ``PollOptions.pause``: the readiness wait slept between polls, deaf to it, up to ``ready_timeout``."""

import threading

import httpx
import pytest

import rlnb
from rlnb import wire
from rlnb.errors import RlnbError
from rlnb.remote.backend import RemoteBackend
from tests.support.fake_api import BASE, FAST_POLL, FakeAPI
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
