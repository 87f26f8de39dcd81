"""A presigned (storage) URL whose host redirects (a CDN in front of a bucket): the payload GET's 302 failed the
operation after 6 polls, "rlnb follows no redirect (the API key would go with it): use the address it names",
though no key goes to storage and the operation had COMPLETED on the server; a checkpoint file's 307 failed the
download the same way. A presigned request now follows up to 5 redirects, within its deadline, with nothing it did
not carry (no key, no cookie), never from https to http, and of a PUT only a 307 / 308; the one it does not follow
is an error saying why, with no word of a key."""

import httpx
import pytest

import rlnb
from rlnb import samples
from rlnb.remote.client import APIClient
from tests.support.checkpoint_storage import CID, Storage
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

BATCH = [samples.cross_entropy(list(b"hello"))]


def via_cdn(fake: FakeAPI, status: int = 302, cdn: str = "https://cdn.storage.test") -> httpx.MockTransport:
    """``fake``, whose storage redirects each payload GET to ``cdn``, which serves it."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.test" and request.method == "GET":
            return httpx.Response(status, headers={"Location": f"{cdn}{request.url.path}?cdn-token=t0k3n"})
        if request.url.host == "cdn.storage.test":
            request = httpx.Request(request.method, f"https://storage.test{request.url.path}", headers=request.headers)
        return fake(request)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_result_payload_behind_a_redirect_is_fetched_without_the_key(status):
    fake = FakeAPI(ready_after=1)
    fake.offload = True
    with rlnb.connect(BASE, api_key=KEY, transport=via_cdn(fake, status), base_model="org/model-a", record=False,
                      **FAST_POLL, **quick({})) as s:  # fmt: skip
        result = s.forward_backward(BATCH).result(30)
    assert result.loss == 99.0 and len(result.loss_fn_outputs) == 1  # the offloaded members, from the CDN
    [cdn] = [r for _, r in fake.log if r.url.host == "storage.test" and r.method == "GET"]  # the hop, as forwarded
    assert "authorization" not in cdn.headers and "cookie" not in cdn.headers
    assert len(fake.calls("POST", "/operations/forward-backward")) == 1


def test_a_checkpoint_file_behind_a_307_is_downloaded(tmp_path):
    storage = Storage({"model.safetensors": b"x" * 100})

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "cdn.test":
            storage.seen.append(request)
            return httpx.Response(200, content=b"x" * 100)
        if request.url.host == "storage.test":
            storage.seen.append(request)
            return httpx.Response(307, headers={"Location": "https://cdn.test/blob?X-Amz-Signature=abc"})
        return storage(request)

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler), **quick({})) as c:
        [path] = c.download_checkpoint(CID, tmp_path)
    assert path.read_bytes() == b"x" * 100
    assert [r.url.host for r in storage.file_gets()] == ["storage.test", "cdn.test"]
    assert all("authorization" not in r.headers for r in storage.file_gets())


def redirecting(sent: list[httpx.Request], answer) -> httpx.MockTransport:
    """An API handing out ``https://storage.test/p1?sig=s``, whose every request ``answer`` answers."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/upload-url"):
            return httpx.Response(200, json={"payload_id": "p1", "upload_url": "https://storage.test/p1?sig=s"})
        if request.url.path.endswith("/download-url"):
            return httpx.Response(200, json={"download_url": "https://storage.test/p1?sig=s"})
        sent.append(request)
        return answer(request)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_an_upload_follows_a_307_or_308_with_its_body_and_no_other_redirect(status):
    """A 301, 302 or 303 turns a PUT into a GET (httpx's rule, the browsers'): one followed would read the GET's 200
    as the payload stored."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/p1":
            return httpx.Response(status, headers={"Location": "/moved/p1?sig=t"})
        return httpx.Response(200)

    with APIClient(BASE, KEY, transport=redirecting(sent, answer), **quick({})) as c:
        if status in (307, 308):
            assert c.upload_payload("s1", b'{"big": 1}') == "p1"
        else:
            with pytest.raises(rlnb.APIStatusError) as info:
                c.upload_payload("s1", b'{"big": 1}')
            said = str(info.value)
            assert "the presigned URL redirects to https://storage.test/moved/p1, which is not followed: it would " \
                "turn the PUT into a GET; rlnb follows a 307 or 308 of a PUT only" in said  # fmt: skip
            assert "API key" not in said and "sig=" not in said
    followed = [("PUT", "/moved/p1", b'{"big": 1}')] if status in (307, 308) else []
    assert [(r.method, r.url.path, r.read()) for r in sent] == [("PUT", "/p1", b'{"big": 1}'), *followed]
    assert all("authorization" not in r.headers for r in sent)


@pytest.mark.parametrize(
    ("location", "sent_to", "why"),
    [
        ("http://storage.test/p1", ["https"], "rlnb follows none from https to http (the data would cross in"),
        ("https://storage.test/loop", ["https"] * 6, "(after 5 redirects), which is not followed: rlnb follows at"),
    ],
    ids=["https to http", "a loop"],
)
def test_a_redirect_not_followed_says_why_without_a_word_of_the_key(location, sent_to, why):
    sent: list[httpx.Request] = []
    moved = httpx.Response(302, headers={"Location": location})
    transport = redirecting(sent, lambda r: moved)
    with APIClient(BASE, KEY, transport=transport, **quick({})) as c, pytest.raises(rlnb.APIStatusError) as info:
        c.download_payload("s1", "p1")
    assert [r.url.scheme for r in sent] == sent_to  # none in clear text; a loop ends
    said = str(info.value)
    assert "302 Found: the presigned URL redirects to " in said and why in said and "API key" not in said


def test_an_http_client_that_follows_redirects_follows_a_presigned_urls_as_rlnb_does():
    """httpx's own following (20 hops) would take a client's ``follow_redirects=True`` past rlnb's limits."""
    sent: list[httpx.Request] = []
    moved = httpx.Response(302, headers={"Location": "http://storage.test/p1"})
    transport = redirecting(sent, lambda r: moved)
    with (
        httpx.Client(transport=transport, follow_redirects=True) as http,
        APIClient(BASE, KEY, http_client=http) as c,
        pytest.raises(rlnb.APIStatusError, match="rlnb follows none from https to http"),
    ):
        c.download_payload("s1", "p1")
    assert [str(r.url) for r in sent] == ["https://storage.test/p1?sig=s"]


def test_a_completed_operation_whose_result_cannot_be_fetched_says_it_ran():
    """Its payload refused on every poll: the operation fails saying it ran and its result could not be fetched, not
    that "the server may run it"."""
    fake = FakeAPI(ready_after=1)
    fake.offload = True

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.test" and request.method == "GET":
            return httpx.Response(404, json={"error": {"message": "expired", "type": "not_found"}})
        return fake(request)

    transport = httpx.MockTransport(handler)
    with (
        rlnb.connect(BASE, api_key=KEY, transport=transport, base_model="org/model-a", record=False, **FAST_POLL,
                     **quick({"max_retries": 2})) as s,
        pytest.raises(rlnb.OperationFailed) as info,
    ):  # fmt: skip
        s.forward_backward(BATCH).result(30)
    said = str(info.value)
    assert "is TRAINING_OPERATION_STATUS_COMPLETED, but its result's payload" in said and "404 expired" in said
    assert "(it ran on the server; its result could not be fetched, 3 times in a row)" in said
    assert "may run it" not in said
