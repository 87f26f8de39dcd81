"""The remote client's loose ends: a waiting status that comes with an error, presigned URLs that point elsewhere
than the API promises, and ``close()`` against a server that is gone."""

import json
import re
from collections.abc import Callable

import httpx
import pytest

import rlnb
from tests.support.fake_api import BASE, FAST_POLL, KEY, NOW, FakeAPI

Handler = Callable[[httpx.Request], httpx.Response]


def with_error(path: str, status: str, error: dict) -> Callable[[Handler], Handler]:
    """The fake, each GET of an object at ``path`` (a regex) answering ``status`` with ``error``."""

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            response = fake(request)
            if request.method == "GET" and re.fullmatch(path, request.url.path):
                data = {**json.loads(response.content), "status": status, "error": error}
                return httpx.Response(response.status_code, json=data)
            return response

        return handler

    return wrap


def test_a_creating_session_with_an_error_ends_the_wait_at_once_and_is_stopped():
    """A session still CREATING that came with an error (the API sets one on a failed session only) was waited on
    until ``ready_timeout`` (30 min by default), and the timeout named no error; a newer status with one ended
    at once."""
    error = {"code": "TRAINING_SESSION_ERROR_CODE_RESOURCE_AT_CAPACITY", "message": "no slot", "occurred_at": NOW}
    fake = FakeAPI()
    wrap = with_error(r"/v1/rl/training-sessions/[^/]+", "TRAINING_SESSION_STATUS_CREATING", error)
    with pytest.raises(rlnb.SessionClosed, match=r"is TRAINING_SESSION_STATUS_CREATING with an error: .*no slot"):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(wrap(fake)), ready_timeout=5, **FAST_POLL)
    assert len(fake.calls("GET", r"/training-sessions/[^/]+$")) == 1  # not polled on
    assert [v["status"] for v in fake.sessions.values()] == ["TRAINING_SESSION_STATUS_STOPPED"]
    assert [v["status"] for v in fake.resources.values()] == ["MODEL_RESOURCES_STATUS_STOPPED"]  # what it created


def test_a_pending_resource_with_an_error_ends_the_wait_at_once_and_is_stopped():
    error = {"code": "MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT", "message": "no GPUs", "occurred_at": NOW}
    fake = FakeAPI()
    wrap = with_error(r"/v1/rl/model-resources/[^/]+", "MODEL_RESOURCES_STATUS_PENDING", error)
    with pytest.raises(rlnb.RlnbError, match=r"is MODEL_RESOURCES_STATUS_PENDING with an error: .*no GPUs"):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(wrap(fake)), ready_timeout=5, **FAST_POLL)
    assert len(fake.calls("GET", r"/model-resources/[^/]+$")) == 1
    assert not fake.sessions and [v["status"] for v in fake.resources.values()] == ["MODEL_RESOURCES_STATUS_STOPPED"]
