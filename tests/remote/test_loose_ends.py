"""The remote client's loose ends: a waiting status that comes with an error, presigned URLs that point elsewhere
than the API promises (``close()`` against a server that is gone: ``test_cleanup_stops``)."""

import json
import re
from collections.abc import Callable

import httpx
import pytest

import rlnb
import rlnb.remote.calls
import rlnb.remote.client
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


class Storage:
    """An API whose payload endpoints hand out ``url`` (for every payload), recording every request made."""

    def __init__(self, url: str):
        self.url, self.seen = url, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if request.url.path.endswith("/payloads/upload-url"):
            return httpx.Response(200, json={"payload_id": "pl-1", "upload_url": self.url})
        if request.url.path.endswith("/download-url"):
            return httpx.Response(200, json={"download_url": self.url})
        return httpx.Response(200, json={"loss": 1.0})  # the presigned host, if it were asked

    def asked(self) -> list[str]:
        return [str(r.url.copy_with(query=None)) for r in self.seen if "/payloads/" not in r.url.path]


@pytest.mark.parametrize("url", ["/storage/pl-1?sig=s", "storage/pl-1?sig=s", "//storage.test/pl-1?sig=s"])
def test_a_relative_presigned_url_is_refused_not_fetched_from_the_api_server(url):
    """The API hands out absolute presigned URLs; a relative one was joined to ``base_url`` + ``/v1/rl`` and
    fetched from (or the payload PUT to) the API server, a path the API does not have."""
    storage = Storage(url)
    with rlnb.remote.client.APIClient("https://rl.test", KEY, transport=httpx.MockTransport(storage)) as client:
        with pytest.raises(rlnb.APIError, match=r"download_url .*is not an absolute http\(s\) URL") as info:
            client.download_payload("sess-1", "pl-1")
        with pytest.raises(rlnb.APIError, match=r"upload_url .*is not an absolute http\(s\) URL"):
            client.upload_payload("sess-1", b"{}")
    assert storage.asked() == [] and "sig=" not in str(info.value)


def test_an_http_presigned_url_under_an_https_base_url_is_refused_before_anything_crosses_in_clear_text():
    """An ``http://`` payload URL under an ``https://`` base_url was followed: the training data went up (and
    results came down) unencrypted, open to be read or changed on the way, with its signature in clear text."""
    storage = Storage("http://storage.test/pl-1?sig=s")
    with rlnb.remote.client.APIClient("https://rl.test", KEY, transport=httpx.MockTransport(storage)) as client:
        with pytest.raises(rlnb.APIError, match=r"download_url http://storage.test/pl-1 is http:// under an https"):
            client.download_payload("sess-1", "pl-1")
        with pytest.raises(rlnb.APIError, match=r"upload_url http://storage.test/pl-1 is http:// under an https"):
            client.upload_payload("sess-1", b"{}")
    assert storage.asked() == []
    storage = Storage("https://storage.test/pl-1?sig=s")  # https storage, and http under an http base, still go
    with rlnb.remote.client.APIClient("https://rl.test", KEY, transport=httpx.MockTransport(storage)) as client:
        assert client.download_payload("sess-1", "pl-1") == {"loss": 1.0}
    assert storage.asked() == ["https://storage.test/pl-1"]
    assert all("Authorization" not in r.headers for r in storage.seen if r.url.host == "storage.test")


def test_the_api_key_goes_to_base_urls_origin_only():
    """Every call that authenticates named a path under ``base_url`` until now, but nothing held it there: an
    absolute URL on another host (or scheme, or port) got the key too."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    calls = rlnb.remote.calls
    with rlnb.remote.client.APIClient("https://rl.test:8443", KEY, transport=httpx.MockTransport(handler)) as client:
        for url in ("/supported-models", "https://rl.test:8443/v1/rl/x", "https://other.test/v1/rl/x",
                    "http://rl.test:8443/v1/rl/x", "https://rl.test/v1/rl/x"):  # fmt: skip
            client._send(calls.Call("GET", url))
    assert [r.headers.get("Authorization") for r in seen] == [f"Bearer {KEY}"] * 2 + [None] * 3


def test_an_operation_whose_result_sits_behind_an_http_url_under_https_fails_naming_it():
    fake = FakeAPI(ready_after=1)
    fake.offload = True  # results come through the side channel
    fake.storage = "http://storage.test"  # whose URLs are http://
    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect("https://rl.test", api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid,
                     ready_timeout=5, record=False, **FAST_POLL)  # fmt: skip
    with pytest.raises(rlnb.OperationFailed, match=r"download_url http://storage.test/\S+ is http:// under an https"):
        s.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])]).result(timeout=10)
    s.close()
    assert not [r for r in fake.calls() if r.url.host == "storage.test"]
