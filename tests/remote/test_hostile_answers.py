"""What a hostile (or newer) server puts around its answers — headers no datetime holds, compressed bodies,
statuses rlnb does not know — and a transport that raises what no API error is: nothing hangs, nothing
fills the memory, the server's word is kept."""

import contextlib
import gzip
import json
import re
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable

import httpx
import pytest
from pydantic import ValidationError

import rlnb
from rlnb import samples, wire
from rlnb.remote.backend import SETTLE_POLLS
from rlnb.remote.client import APIClient
from rlnb.remote.retry import RetryPolicy
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

Handler = Callable[[httpx.Request], httpx.Response]
BATCH = [samples.cross_entropy([1, 2, 3])]


def session_on(fake: FakeAPI, wrap: Callable[[Handler], Handler]) -> rlnb.Session:
    """A session on ``fake``, every request going through ``wrap(fake)``."""
    rid = fake.add_resource({"adam": {}})
    return rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(wrap(fake)), model_resources_id=rid, ready_timeout=5,
        operation_timeout=20, record=False, **FAST_POLL, **quick({}),
    )  # fmt: skip


def first_poll(answer: httpx.Response) -> Callable[[Handler], Handler]:
    """The first GET of an operation gets ``answer``; everything else goes to the fake."""
    done = threading.Event()

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "GET" and "/operations/" in request.url.path and not done.is_set():
                done.set()
                return answer
            return fake(request)

        return handler

    return wrap


@pytest.mark.parametrize("date", ["Mon, 01 Jan 99999 00:00:00 GMT", "Fri, 31 Dec 9999999999999999 23:59:59 GMT"])
def test_a_retry_after_date_no_datetime_holds_is_backoff_not_a_dead_poll_thread(date):
    """``Retry-After: <a year past 9999>`` raised ValueError / OverflowError from the stdlib inside the send path:
    the poll thread died, and the operation waited for ever (``operation_timeout`` no longer applied)."""
    s = session_on(FakeAPI(ready_after=1), first_poll(httpx.Response(503, headers={"Retry-After": date})))
    assert s.forward_backward(BATCH).result(timeout=10).loss == 2.5
    assert RetryPolicy().delay(0, httpx.Headers({"retry-after": date})) <= 0.5  # the backoff
    s.close()


def test_a_date_header_no_datetime_holds_leaves_the_clock_alone():
    """The server's clock (``Date``) read after a lost create raised OverflowError out of ``connect``."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": []}, headers={"Date": "Fri, 31 Dec 9999999999999999 23:59:59 GMT"})

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler)) as client:
        client.supported_models()
        assert client.server_time(1000.0) == 1000.0


def test_a_poll_that_raises_what_no_api_error_is_fails_its_operation_and_polling_goes_on():
    """An injected transport's own error (here a RuntimeError) in a poll ended the poll thread: that operation
    and every later one of the session waited for ever."""

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "GET" and request.url.path.endswith("/op-3"):
                raise RuntimeError(f"the proxy broke (Bearer {KEY})")
            return fake(request)

        return handler

    s = session_on(FakeAPI(ready_after=1), wrap)
    first = s.forward_backward(BATCH)
    with pytest.raises(rlnb.OperationFailed) as info:
        first.result(timeout=10)
    assert "RuntimeError: the proxy broke" in str(info.value) and KEY not in str(info.value)
    assert s.forward_backward(BATCH).result(timeout=10).loss == 2.5  # the poller lives on
    s.close()


class Chunked(httpx.SyncByteStream):
    """A body that arrives in 64 KiB reads, as over a socket (an ``httpx.Response`` of bytes is decoded when made)."""

    def __init__(self, data: bytes):
        self.data = data

    def __iter__(self):
        return (self.data[i : i + 65536] for i in range(0, len(self.data), 65536))


def gzip_layers(data: bytes, layers: int) -> bytes:
    for _ in range(layers):
        data = gzip.compress(data, 9)
    return data


def test_a_compressed_bomb_is_cut_at_max_response_bytes_without_decoding_it_whole():
    """httpx decodes each chunk whole: 3 KB of ``Content-Encoding: gzip, gzip`` took 4 GB of memory before the
    256 MiB cap was checked (brotli the same), so a few kilobytes could end the kernel."""
    bomb = gzip_layers(b"\0" * (64 << 20), 2)  # 64 MiB in a few kilobytes
    assert len(bomb) < 100_000
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=Chunked(bomb), headers={"Content-Encoding": "gzip, gzip"})

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler), max_response_bytes=1 << 20) as client:
        tracemalloc.start()
        try:
            with pytest.raises(rlnb.APIError, match="larger than max_response_bytes"):
                client.supported_models()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MiB held for a 1 MiB cap"
    assert len(seen) == 1 and seen[0].headers["Accept-Encoding"] == "gzip, deflate"


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "deflate", "deflate-raw", "gzip, gzip", "identity"])
def test_compressed_answers_are_read_as_they_were_before(coding):
    body = json.dumps({"data": [{"base_model": "org/m", "default_gpu_type": "B200-SXM"}]}).encode()
    if coding == "deflate":
        body = zlib.compress(body)
    elif coding == "deflate-raw":  # deflate without its zlib header, as some servers send it
        z = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body, coding = z.compress(body) + z.flush(), "deflate"
    elif "gzip" in coding:
        body = gzip_layers(body, coding.count("gzip"))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Chunked(body), headers={"Content-Encoding": coding})

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler)) as client:
        assert client.supported_models().data[0].base_model == "org/m"


def test_a_coding_rlnb_did_not_ask_for_is_named_not_decoded():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Chunked(b"\x0b\x01\x80{}\x03"), headers={"Content-Encoding": "br"})

    client = APIClient(BASE, KEY, transport=httpx.MockTransport(handler), max_retries=0)
    with client, pytest.raises(rlnb.APIError, match="Content-Encoding br, which rlnb did not ask for"):
        client.supported_models()


@pytest.mark.parametrize("coding", ["none", "utf-8", "binary", "Identity, none"])
def test_a_content_encoding_that_names_no_coding_is_read_as_it_came(coding):
    """A misconfigured proxy's ``Content-Encoding: none`` (or ``utf-8``, ``binary``): httpx read the body as it
    came; refused as "a coding rlnb did not ask for", every call failed, unretried."""
    body = json.dumps({"data": [{"base_model": "org/m", "default_gpu_type": "B200-SXM"}]}).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Chunked(body), headers={"Content-Encoding": coding})

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler), max_retries=0) as client:
        assert client.supported_models().data[0].base_model == "org/m"


def newer_revision(fake: Handler) -> Handler:
    """The fake, answering as a newer API revision: a GPU type, a resource and a session status (a capacity queue
    before READY / RUNNING) and a stop reason that rlnb's lists do not have."""
    renames = {
        "B200-SXM": "B300-SXM",
        "MODEL_RESOURCES_STATUS_PENDING": "MODEL_RESOURCES_STATUS_QUEUED",
        "TRAINING_SESSION_STATUS_CREATING": "TRAINING_SESSION_STATUS_WARMING_UP",
    }
    sequence = {"tokens": ["7"], "stop_reason": "STOP_REASON_TOOL_CALL"}

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        text = response.content.decode()
        for old, new in renames.items():
            text = text.replace(old, new)
        data = json.loads(text)
        for resource in data.get("data", [data]) if isinstance(data, dict) else []:
            if "compute_config" in resource:
                resource["compute_config"]["gpu_type"] = "B300-SXM"
        if "/operations/sample/" in request.url.path and data.get("status", "").endswith("COMPLETED"):
            data["output"] = {"results": [{"policy_segments": [], "sequences": [sequence]}]}
        return httpx.Response(response.status_code, json=data)

    return handler


@pytest.mark.parametrize("base_model", [None, "org/model-a"])
def test_enum_values_of_a_newer_api_revision_are_kept_as_the_server_sends_them(base_model):
    """A GPU type, a resource or session status or a stop reason newer than rlnb's lists refused the whole answer
    (the official SDK keeps them): ``connect`` failed with pydantic's "Input should be 'B200-SXM'" (given a
    ``base_model``, after creating the resource, which it left running), a resource queued for capacity ended the
    start, and a sample with a new stop reason failed."""
    fake = FakeAPI(ready_after=2)
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(newer_revision(fake)), base_model=base_model,
        ready_timeout=5, record=False, **FAST_POLL, **quick({}),
    )  # fmt: skip
    assert s.info().status == wire.SessionStatus.RUNNING
    assert s.backend.resource.compute_config.gpu_type == "B300-SXM"
    out = s.sample([[1, 2]], max_tokens=1).result(timeout=10)
    assert out.results[0].sequences[0].stop_reason == "STOP_REASON_TOOL_CALL"
    s.close()
    assert fake.resources[s.backend.resource.id]["status"] == "MODEL_RESOURCES_STATUS_STOPPED"


def test_outside_a_servers_answer_the_lists_still_hold():
    """``rlnb serve`` reads its own journal with the same models: a damaged status there is still refused."""
    session = {
        "id": "s", "status": "TRAINING_SESSION_STATUS_WARMING_UP", "base_model": "m", "model_resources_id": "r",
        "created_by": "u", "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
    }  # fmt: skip
    with pytest.raises(ValidationError, match="status"):
        wire.Session.model_validate(session)
    assert wire.Session.model_validate(session, context=wire.FROM_SERVER).status == session["status"]
    with pytest.raises(ValidationError, match="status"):
        wire.Session.model_validate({**session, "status": 5}, context=wire.FROM_SERVER)


@pytest.mark.parametrize(
    ("base", "location", "said"),
    [
        ("http://rl.test", "https://rl.test/v1/rl/supported-models", "pass base_url='https://rl.test'"),
        (
            "https://old.test/proxy",
            "https://new.test/proxy/v1/rl/supported-models?x=1",
            "base_url='https://new.test/proxy'",
        ),
        ("https://rl.test", "/elsewhere", "redirects to https://rl.test/elsewhere; rlnb follows no redirect"),
    ],
)
def test_a_redirect_says_where_to_and_takes_no_key_along(base, location, said):
    """``connect("http://...")`` to an https API (or an old host name) failed "301 <html>Moved</html>"."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(301, headers={"Location": location}, text="<html>Moved</html>")

    plain = pytest.warns(rlnb.CleartextKeyWarning) if base.startswith("http:") else contextlib.nullcontext()
    with pytest.raises(rlnb.APIStatusError) as info, plain:  # the key went to http://rl.test: said, too
        rlnb.connect(base, api_key=KEY, transport=httpx.MockTransport(handler), record=False, **quick({}))
    assert said in str(info.value) and "301 Moved Permanently" in str(info.value) and "x=1" not in str(info.value)
    assert info.value.status_code == 301 and len(seen) == 1  # not retried, not followed


@pytest.mark.parametrize("what", ["training-sessions", "model-resources"])
def test_an_answer_about_another_session_or_resource_is_refused_and_the_own_one_stopped(what):
    """A GET of session (or resource) X answered with Y's object (a proxy's cache): ``connect`` took Y as its
    session, ran on it, and ``close()`` stopped Y, someone else's, leaving the session it created running."""
    fake = FakeAPI(ready_after=1)
    rid = fake.add_resource({"adam": {}})
    other_rid = fake.add_resource({"adam": {}})
    other = fake.add_session(other_rid)  # someone else's, RUNNING

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        if request.method != "GET" or not re.fullmatch(rf"/v1/rl/{what}/[^/]+", request.url.path):
            return response
        return httpx.Response(
            200, json={**json.loads(response.content), "id": other if "sessions" in what else other_rid}
        )

    with pytest.raises(rlnb.APIError, match=r"its id is '(sess|mr)-\d+', for '(sess|mr)-\d+'"):
        rlnb.connect(
            BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid, ready_timeout=5,
            record=False, **FAST_POLL, **quick({}),
        )  # fmt: skip
    assert fake.sessions[other]["status"] == "TRAINING_SESSION_STATUS_RUNNING"  # never touched
    own = [s for sid, s in fake.sessions.items() if sid != other]
    assert all(s["status"] == "TRAINING_SESSION_STATUS_STOPPED" for s in own)  # what it created is stopped


@pytest.mark.parametrize("url", ["http://", "https://:443", "http:///v1"])
def test_a_target_that_names_no_host_is_refused_before_anything_is_sent(url):
    """``rlnb.connect("http://")`` (an unset host in a notebook's f-string) sent its create 6 times over 14 s and
    failed "Request URL is missing an 'http://' or 'https://' protocol", which it has."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    with pytest.raises(ValueError, match=r"the target \(the base_url\) .* names no host"):
        rlnb.connect(url, transport=transport, record=False, max_retries=0)
    assert not sent


@pytest.mark.parametrize("url", ["http://", "https://:443", "http:///v1", "ftp://rl.test", "rl.test:8000"])
def test_an_api_client_base_url_that_names_no_host_or_no_http_scheme_is_refused_before_anything_is_sent(
    url, monkeypatch
):
    """tnb U3: ``APIClient("http://")`` (and ``$TOGETHER_BASE_URL`` so set) was taken, as ``connect``'s target was
    before F1; its first call was retried for seconds, then failed "missing an 'http://' protocol", which it has. One
    check (``rlnb.remote.urls.check_base_url``) now serves both."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    problem = r"names no host" if "://" in url and url.startswith("http") else r"must be an http\(s\)://host"
    with pytest.raises(ValueError, match=rf"^base_url .*{problem}"):
        APIClient(url, api_key=KEY, transport=transport, max_retries=0)
    monkeypatch.setenv("TOGETHER_BASE_URL", url)
    with pytest.raises(ValueError, match=rf"^TOGETHER_BASE_URL .*{problem}"):
        APIClient(api_key=KEY, transport=transport, max_retries=0)
    assert not sent


@pytest.mark.parametrize("url", [f"https://rl.test/?api_key={KEY}", "https://rl.test#v1", "https://rl.test/?"])
def test_a_base_url_with_a_query_or_fragment_is_refused_before_anything_is_sent(url, monkeypatch):
    """``https://host/?api_key=sk-...`` sent every call to ``/``, the key in its query, and failed "404 ... GET
    https://host/" naming neither the URL's mistake nor the fix."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    with pytest.raises(ValueError, match="the target .* must have no query") as info:
        rlnb.connect(url, transport=transport, record=False)
    with pytest.raises(ValueError, match="base_url must have no query"):
        APIClient(url, transport=transport)
    monkeypatch.setenv("TOGETHER_BASE_URL", url)
    with pytest.raises(ValueError, match="TOGETHER_BASE_URL must have no query"):
        APIClient(transport=transport)
    assert not sent and KEY not in str(info.value)


def test_a_submission_answered_with_an_earlier_operations_id_fails_not_takes_its_result():
    """A server that deduplicates by body (the same batch twice, as an overfitting loop sends it) answered the
    second forward-backward with the first's envelope: it was polled as that one and completed with its loss,
    though it never ran (its gradients were never added)."""
    posts: dict[bytes, httpx.Response] = {}

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and "/operations/" in request.url.path:
                if request.content not in posts:
                    posts[request.content] = fake(request)
                return posts[request.content]
            return fake(request)

        return handler

    s = session_on(FakeAPI(ready_after=1), wrap)
    first, again = s.forward_backward(BATCH), s.forward_backward(BATCH)
    assert first.result(timeout=10).loss == 2.5
    with pytest.raises(rlnb.OperationFailed, match=f"id of an earlier operation, {first.id}"):
        again.result(timeout=10)
    assert s.forward_backward([samples.cross_entropy([4, 5])]).result(timeout=10).loss == 2.5
    assert list(s.history.df.status)[-3:] == [wire.OperationStatus.COMPLETED, wire.OperationStatus.FAILED,
                                              wire.OperationStatus.COMPLETED]  # fmt: skip
    s.close()


def test_a_stale_answer_naming_an_earlier_operation_is_asked_again_under_the_same_key():
    """A proxy that sent an answer twice shifted the keep-alive stream: the next optim-step's POST read the earlier
    one's envelope and was recorded FAILED "may not have run", though the server took it (review42a L4; a user who
    submitted it again stepped twice). Asked again under its Idempotency-Key, the server replays the true one."""
    keys: list[str] = []
    last: list[httpx.Response] = []

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            response = fake(request)
            if request.method == "POST" and request.url.path.endswith("/optim-step"):
                keys.append(request.headers["Idempotency-Key"])
                if len(keys) == 2 and last:  # the second optim-step's first try reads the first one's answer again
                    return last[0]
                last.append(response)
            return response

        return handler

    s = session_on(FakeAPI(ready_after=1), wrap)
    steps = [s.optim_step(rlnb.AdamParams()).result(timeout=10).step for _ in range(2)]
    assert steps == [1, 2] and s.step == 2
    assert len(keys) == 3 and keys[1] == keys[2]  # asked again, under the same key
    s.close()


@pytest.mark.parametrize(
    ("results", "sequences"), [(1, 2), (2, 1), (3, 2)], ids=["a-prompt-short", "a-sample-short", "extra"]
)
def test_a_sample_answer_that_does_not_fit_the_request_fails_naming_the_shapes(results, sequences):
    """Two prompts of two samples each answered with another shape: ``result()`` gave it as it came, so a user's
    ``zip(prompts, out.results)`` dropped a prompt in silence, ``rl_step`` failed "zip() argument 2 is shorter"
    and a group's advantages came from fewer rewards."""
    sequence = {"tokens": ["7"], "stop_reason": "STOP_REASON_LENGTH"}
    output = {"results": [{"policy_segments": [], "sequences": [sequence] * sequences}] * results}

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            response = fake(request)
            data = json.loads(response.content)
            if "/operations/sample" in request.url.path and data.get("status", "").endswith("COMPLETED"):
                return httpx.Response(200, json={**data, "output": output})
            return response

        return handler

    s = session_on(FakeAPI(ready_after=1), wrap)
    op = s.sample([[1, 2], [3]], num_samples=2, max_tokens=1)
    with pytest.raises(rlnb.OperationFailed, match=rf"answered {results} results .* for 2 prompts of 2 samples each"):
        op.result(timeout=10)
    assert s.history.df.status.iloc[-1] == wire.OperationStatus.FAILED
    s.close()


@pytest.mark.parametrize("first", ["PENDING", "QUEUED_FOR_GPU"])
def test_an_operation_status_of_a_newer_revision_is_polled_on_and_said_once(caplog, tmp_path, first):
    """An operation status newer than rlnb's list (a capacity queue, say), in a poll's answer or the submission's,
    failed the operation at once ("... Input should be ..."), though nothing says it ends it: it is polled on, said
    once per status, and recorded as it came."""
    fake = FakeAPI(op_states=(first, "QUEUED_FOR_GPU", "QUEUED_FOR_GPU", "RUNNING"))
    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid, ready_timeout=5,
        operation_timeout=20, runs_dir=tmp_path, **FAST_POLL, **quick({}),
    )  # fmt: skip
    first, second = s.forward_backward(BATCH), s.forward_backward(BATCH)
    assert first.result(timeout=10).loss == second.result(timeout=10).loss == 2.5
    said = [r.getMessage() for r in caplog.records if "a status rlnb does not know" in r.getMessage()]
    assert len(said) == 1 and f"{wire.OperationStatus.FAILED.removesuffix('FAILED')}QUEUED_FOR_GPU" in said[0]
    s.close()
    assert list(s.history.df.status) == [wire.OperationStatus.COMPLETED] * 2
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # recording went through the newer status too


def test_operations_behind_one_in_a_newer_status_are_polled_on_a_server_that_runs_them_in_order():
    """On an in-order server only the oldest operation was polled: one left in a newer status (a newer server's
    ``CANCELLED``, an end rlnb cannot tell) held every later one, finished on the server, until its deadline."""
    fake = FakeAPI(op_states=("PENDING",))
    fake.advertise, fake.hold = True, True
    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid, ready_timeout=5,
        operation_timeout=60, record=False, **FAST_POLL, **quick({}),
    )  # fmt: skip
    with s:
        head, later = s.forward_backward(BATCH), s.forward_backward(BATCH)
        until = time.monotonic() + 10
        while not (head.id and later.id):
            assert time.monotonic() < until
            time.sleep(0.01)
        fake.ops[head.id]["status"] = f"{wire.OperationStatus.FAILED.removesuffix('FAILED')}CANCELLED"
        fake.ops[later.id]["status"] = "COMPLETED"
        assert later.result(timeout=10).loss == 2.5
        assert not head.done()  # still followed, under its own deadline


def test_an_operation_left_in_a_newer_status_fails_at_its_deadline_naming_that_status():
    """The deadline (``operation_timeout``) still ends an operation that a newer status holds, and says which."""
    fake = FakeAPI(op_states=("PENDING", "THROTTLED"))
    fake.hold = True
    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid, ready_timeout=5,
        operation_timeout=0.5, record=False, **FAST_POLL, **quick({}),
    )  # fmt: skip
    with pytest.raises(rlnb.OperationFailed, match=r"STATUS_THROTTLED \(a status rlnb does not know\)") as failed:
        s.forward_backward(BATCH).result(timeout=10)
    assert failed.value.code == wire.OperationErrorCode.TIMEOUT
    s.close()


def newer_session_status(status: str, error: dict | None = None) -> Callable[[Handler], Handler]:
    """The fake, its sessions answering in ``status`` (a newer revision's), with ``error`` if given."""

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            response = fake(request)
            if request.method == "GET" and re.fullmatch(r"/v1/rl/training-sessions/[^/]+", request.url.path):
                data = {**json.loads(response.content), "status": status, "error": error}
                return httpx.Response(response.status_code, json=data)
            return response

        return handler

    return wrap


def test_a_session_kept_in_a_newer_status_times_out_naming_it_and_is_stopped(caplog):
    """``connect`` waited its whole ``ready_timeout`` through a status it could not read, then said only "still"."""
    fake = FakeAPI()
    rid = fake.add_resource({"adam": {}})
    transport = httpx.MockTransport(newer_session_status("TRAINING_SESSION_STATUS_HIBERNATING")(fake))
    with pytest.raises(rlnb.OperationTimeout, match=r"statuses rlnb does not know seen: TRAINING_SESSION_STATUS_HIB"):
        rlnb.connect(BASE, api_key=KEY, transport=transport, model_resources_id=rid, ready_timeout=0.3, **FAST_POLL)
    said = [r.getMessage() for r in caplog.records if "a status rlnb does not know" in r.getMessage()]
    assert len(said) == 1 and "HIBERNATING" in said[0]
    assert [v["status"] for v in fake.sessions.values()] == ["TRAINING_SESSION_STATUS_STOPPED"]


def test_a_session_in_a_newer_status_with_an_error_ends_the_wait_at_once():
    """A newer status that comes with an error (the API sets one on a failed session only) is an end: ``connect``
    waited its whole ``ready_timeout`` (30 min by default) for a session that had failed, then named no error."""
    error = {
        "code": "TRAINING_SESSION_ERROR_CODE_TIMED_OUT",
        "message": "evicted",
        "occurred_at": "2025-01-01T00:00:00Z",
    }
    fake = FakeAPI()
    rid = fake.add_resource({"adam": {}})
    transport = httpx.MockTransport(newer_session_status("TRAINING_SESSION_STATUS_EVICTED", error)(fake))
    with pytest.raises(
        rlnb.SessionClosed, match=r"STATUS_EVICTED, a status rlnb does not know, with an error: .*evicted"
    ):
        rlnb.connect(BASE, api_key=KEY, transport=transport, model_resources_id=rid, ready_timeout=60, **FAST_POLL)
    assert [v["status"] for v in fake.sessions.values()] == ["TRAINING_SESSION_STATUS_STOPPED"]  # what it created


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_server_that_advertises_long_polls_but_answers_at_once_is_not_polled_in_a_loop():
    """A server (or a proxy before it) that says ``rlnb-long-poll-max-wait`` but answers each ``?wait=`` GET at once,
    unchanged: every answer was asked again at once, thousands of GETs a second for as long as the operation ran."""
    fake = FakeAPI(op_states=("PENDING", "RUNNING"))
    fake.advertise, fake.hold = True, True
    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid, ready_timeout=5,
        operation_timeout=1, poll_min=0.05, poll_max=0.2, record=False, **quick({}),
    )  # fmt: skip
    assert s.backend.client.features.long_poll_max_wait == 30.0
    with pytest.raises(rlnb.OperationFailed, match="operation_timeout"):
        s.forward_backward(BATCH).result(timeout=10)
    polls = fake.calls("GET", "/operations/")
    assert polls[0].url.params["wait"] and len(polls) < 100  # about 15 backed off; the loop made 1,800 in this 1 s
    s.close()


def test_close_stops_the_resource_connect_created_whatever_resource_the_stops_answer_names():
    """The stop's answer named another model resource (a server's bug, a proxy's cache): ``close()`` stopped that
    one, someone else's, with its sessions, and left the resource ``connect`` had created running, and paid for."""
    fake = FakeAPI(ready_after=1)
    other_rid = fake.add_resource({"adam": {}})

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        if request.url.path.endswith("/stop") and "/training-sessions/" in request.url.path:
            return httpx.Response(200, json={**json.loads(response.content), "model_resources_id": other_rid})
        return response

    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(handler), base_model="org/model-a", ready_timeout=5,
        record=False, **FAST_POLL, **quick({}),
    )  # fmt: skip
    own = s.backend.resource.id
    s.close()
    assert fake.resources[own]["status"] == "MODEL_RESOURCES_STATUS_STOPPED"
    assert fake.resources[other_rid]["status"] == "MODEL_RESOURCES_STATUS_READY"


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_last_polls_of_close_share_one_deadline():
    """A server that takes the stop, then answers every poll 503 with ``Retry-After: 1``: each operation in flight
    was asked for its whole call deadline in turn (120 s each by default: 20 minutes to close 10 operations)."""
    fake = FakeAPI(ready_after=1, op_states=("RUNNING",))  # RUNNING when submitted: no poll before close
    fake.hold = True
    stopped, asked = threading.Event(), []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stop"):
            stopped.set()
        elif stopped.is_set() and request.method == "GET" and "/operations/" in request.url.path:
            asked.append(request.url.path)
            return httpx.Response(503, headers={"Retry-After": "1"})
        return fake(request)

    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid, ready_timeout=5,
        deadline=2.5, poll_min=60, poll_max=60, record=False, **quick({}),
    )  # fmt: skip
    ops = [s.forward_backward(BATCH) for _ in range(5)]
    until = time.monotonic() + 10
    while any(op.status != wire.OperationStatus.RUNNING for op in ops):  # all sent: in flight
        assert time.monotonic() < until, [op.status for op in ops]
        time.sleep(0.01)
    s.close()
    assert all(op.done() and op.error.code == wire.OperationErrorCode.SESSION_NOT_ACTIVE for op in ops)
    per_op = [asked.count(path) for path in dict.fromkeys(asked)]
    assert len(per_op) == 5 and max(per_op) <= 3  # each asked at 0, 1 and 2 s at most, then the one deadline was spent


def test_the_last_polls_of_close_go_several_at_once_and_report_in_submission_order():
    """Asked one after another, 30 operations in flight on a server answering in 1 s held ``close()`` (and the
    interpreter's exit, which closes every session) 31 s; up to ``SETTLE_POLLS`` go at once now."""
    fake = FakeAPI(ready_after=1, op_states=("RUNNING",))
    fake.hold = True
    stopped, lock, now, peak = threading.Event(), threading.Lock(), [0], [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stop"):
            stopped.set()
        elif stopped.is_set() and request.method == "GET" and "/operations/" in request.url.path:
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            time.sleep(0.2)  # a slow server
            with lock:
                now[0] -= 1
        return fake(request)

    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid, ready_timeout=5,
        poll_min=60, poll_max=60, record=False, **quick({}),
    )  # fmt: skip
    ops = [s.forward_backward(BATCH) for _ in range(2 * SETTLE_POLLS)]
    until = time.monotonic() + 10
    while any(op.status != wire.OperationStatus.RUNNING for op in ops):  # all sent: in flight
        assert time.monotonic() < until, [op.status for op in ops]
        time.sleep(0.01)
    s.close()
    assert all(op.error.code == wire.OperationErrorCode.SESSION_NOT_ACTIVE for op in ops)
    assert 2 <= peak[0] <= SETTLE_POLLS  # 1 before
    rows = s.history.df
    assert list(rows.op_id) == [op.id for op in ops]  # reported, and recorded, in the order submitted


def test_a_resource_whose_optimizer_rlnb_does_not_know_is_refused_not_taken_for_adam():
    """A model resource with a newer revision's optimizer: ``connect`` took it for Adam, and every optim-step would
    have sent Adam's parameters to it. (An empty ``optimizer_config`` is the server's default, Adam, as before.)"""
    fake = FakeAPI(ready_after=1)
    rid = fake.add_resource({"lion": {"lr": 1}})
    with pytest.raises(rlnb.RlnbError, match=r"uses an optimizer rlnb does not know \(lion\); it runs adam, muon"):
        rlnb.connect(
            BASE, api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid, ready_timeout=5,
            record=False, **FAST_POLL, **quick({}),
        )  # fmt: skip
    assert not fake.sessions


@pytest.mark.parametrize("config", [{}, {"adam": None, "muon": None, "lion": None}])
def test_a_resource_with_an_empty_optimizer_config_is_the_servers_default_adam(config):
    """Nothing named (or every option written out as null): the server's default, Adam, as before."""
    fake = FakeAPI(ready_after=1)
    rid = fake.add_resource(config)
    with rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid, ready_timeout=5,
        record=False, **FAST_POLL, **quick({}),
    ) as s:  # fmt: skip
        assert s.optimizer == "adam"


def test_a_session_said_to_run_on_another_resource_than_it_was_started_on_is_refused_and_stopped():
    """The started session's answer named another model resource (a server's bug, a proxy's cache): ``connect``
    ran it with the optimizer and LoRA checked on the resource it asked for, which were not the ones it ran on."""
    fake = FakeAPI(ready_after=1)
    rid, other_rid = fake.add_resource({"adam": {}}), fake.add_resource({"muon": {}})

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        if request.method == "GET" and re.fullmatch(r"/v1/rl/training-sessions/[^/]+", request.url.path):
            return httpx.Response(200, json={**json.loads(response.content), "model_resources_id": other_rid})
        return response

    with pytest.raises(rlnb.RlnbError, match=rf"started on model resource {rid}, but the server says it runs on mr-"):
        rlnb.connect(
            BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid, ready_timeout=5,
            record=False, **FAST_POLL, **quick({}),
        )  # fmt: skip
    assert [s["status"] for s in fake.sessions.values()] == ["TRAINING_SESSION_STATUS_STOPPED"]
    assert fake.resources[other_rid]["status"] == "MODEL_RESOURCES_STATUS_READY"


@pytest.mark.slow  # a second of an operation polled to its operation_timeout
def test_a_server_that_advertises_a_tiny_long_poll_is_not_polled_in_a_loop():
    """``rlnb-long-poll-max-wait: 0.000001``: each ``?wait=`` GET, answered at once, had taken half its wait, so it
    was asked again at once: a GET per round trip for as long as the operation ran (the guard above undone)."""
    fake = FakeAPI(op_states=("PENDING", "RUNNING"))
    fake.advertise, fake.hold = True, True

    def tiny(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        response.headers["rlnb-long-poll-max-wait"] = "0.000001"
        return response

    rid = fake.add_resource({"adam": {}})
    s = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(tiny), model_resources_id=rid, ready_timeout=5,
        operation_timeout=1, poll_min=0.05, poll_max=0.2, record=False, **quick({}),
    )  # fmt: skip
    with pytest.raises(rlnb.OperationFailed, match="operation_timeout"):
        s.forward_backward(BATCH).result(timeout=10)
    assert len(fake.calls("GET", "/operations/")) < 100  # about 15 backed off
    s.close()


@pytest.mark.parametrize("said", ["0.000001", "0.5", "nan", "-inf", "-3", "1_0", "٣٠", " 30 x", "1e400"])
def test_a_long_poll_wait_that_is_no_usable_number_is_no_long_poll(said):
    """Python's ``float`` took ``nan``, ``1_0`` and other scripts' digits; a wait under a second is asked again at
    once (``test_a_server_that_advertises_a_tiny_long_poll_is_not_polled_in_a_loop``)."""
    from rlnb.remote.features import ServerInfo

    info = ServerInfo(("https", "api.test", None), extensions=True)
    info.learn(httpx.URL("https://api.test/x"), httpx.Response(200, headers={"rlnb-long-poll-max-wait": said.encode()}))
    assert info.features.long_poll_max_wait is None
    info.learn(httpx.URL("https://api.test/x"), httpx.Response(200, headers={"rlnb-long-poll-max-wait": "30.0"}))
    assert info.features.long_poll_max_wait == 30.0
