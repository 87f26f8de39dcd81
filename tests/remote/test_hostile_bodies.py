"""What a hostile server puts in the bodies it sends (issue 19 §1.3, §1.9): the API key echoed into
successful answers, a schema-invalid answer that quotes it, and an answer that never ends."""

import json
import socket
import threading
import time

import httpx
import pytest

import rlnb
from rlnb import samples
from rlnb.remote import bodies
from rlnb.remote.client import APIClient, RetryPolicy
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick
from tests.support.hostile import Loopback, everything_in, write_response

QUICK = RetryPolicy(max_retries=2, initial_delay=0.01, max_delay=0.05)


def escaped(text: str) -> str:
    """``text`` as JSON ``\\u`` escapes: the raw body holds no literal copy of it."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


def echoing_into(fake: FakeAPI):
    """The fake API, echoing the request's Authorization header (escaped) into every successful body: a
    session's ``display_name``, a metric's name and value text, and a forward-backward's metrics."""

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        auth = request.headers.get("authorization", "")
        if response.status_code != 200 or not auth:
            return response
        data = json.loads(response.content)
        if str(data.get("status", "")).startswith("TRAINING_SESSION_STATUS"):
            data["display_name"] = f"run of {auth}"
        output = data.get("output")
        if isinstance(output, dict) and "loss" in output:
            output["metrics"] = {**(output.get("metrics") or {}), f"echo {auth}": 1.0}
        text = json.dumps(data).replace(auth, escaped(auth))
        return httpx.Response(200, content=text.encode(), headers=response.headers)

    return handler


def test_a_key_echoed_into_successful_bodies_reaches_no_info_history_or_run_folder():
    fake = FakeAPI()
    session = rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(echoing_into(fake)), ready_timeout=5, **FAST_POLL, **quick({})
    )
    info = session.info()
    assert info.display_name == "run of Bearer ***"  # the body did carry it, and it was masked
    result = session.forward_backward([samples.cross_entropy([1, 2, 3])]).result(timeout=10)
    assert "echo Bearer ***" in (result.metrics or {})
    session.close()
    texts = [repr(info), info.model_dump_json(), repr(result), session.history.df.to_string()]
    assert session.history.path is not None
    texts += [f.read_text() for f in session.history.path.iterdir()]
    assert all(KEY not in text for text in texts)


def test_a_schema_invalid_body_that_quotes_the_key_keeps_it_out_of_the_exception_chain():
    def invalid(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": request.headers["authorization"], "status": 7})

    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(invalid), retry=QUICK) as client,
        pytest.raises(rlnb.APIError, match="not a valid Session") as info,
    ):
        client.get_session("s")
    assert info.value.__context__ is None and info.value.__cause__ is None  # pydantic's error quotes the body
    assert KEY not in everything_in(info.value)


@pytest.mark.parametrize("said", ["r-1", " ", "r" * (bodies.MAX_ID + 1), ["r-1"]], ids=["id", "blank", "long", "list"])
def test_an_unreadable_answer_names_its_id_only_where_it_is_one(said):
    """``APIError.answer_id`` (what a create's unreadable answer made, named in the error's note) holds an id as
    the API writes them: not a blank one, nor 201 characters a hostile server put in a traceback."""
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json={"id": said}))
    with APIClient(BASE, KEY, transport=transport, retry=QUICK) as client, pytest.raises(rlnb.APIError) as info:
        client.get_session("s")
    assert "not a valid Session" in str(info.value)
    assert info.value.answer_id == (said if said == "r-1" else None)


@pytest.mark.parametrize("body", ["not json {", "[" * 100_000 + "]" * 100_000], ids=["not-json", "deep"])
def test_a_body_that_is_not_json_is_an_api_error_without_the_raw_text(body):
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=(body + request.headers["authorization"]).encode())

    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(answer), retry=QUICK) as client,
        pytest.raises(rlnb.APIError, match="not a valid Session: not JSON") as info,
    ):
        client.get_session("s")
    assert info.value.__context__ is None and KEY not in everything_in(info.value)


def endless(sent: list[int], declared: int | None = None):
    """Answer 200 with headers at once, then a body that never ends (64 KB chunks as fast as the client
    reads, up to 256 MiB, then silence until the test stops the server); ``sent`` counts the bytes."""

    def answer(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
        length = f"Content-Length: {declared}" if declared is not None else "Transfer-Encoding: chunked"
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}\r\n\r\n".encode())
        chunk = b" " * 65536
        framed = chunk if declared is not None else b"10000\r\n" + chunk + b"\r\n"
        sent.append(0)
        while sent[-1] < 256 << 20 and not stopping.is_set():
            conn.sendall(framed)
            sent[-1] += len(chunk)
        stopping.wait()

    return answer


@pytest.mark.slow
@pytest.mark.parametrize("declared", [None, 1 << 40], ids=["chunked", "declared-1-TiB"])
def test_an_endless_body_is_cut_at_max_response_bytes(declared):
    sent: list[int] = []
    with Loopback(endless(sent, declared)) as server:
        client = APIClient(server.url, KEY, retry=QUICK, deadline=20, max_response_bytes=1 << 20)
        start = time.monotonic()
        with pytest.raises(rlnb.APIError, match=r"larger than max_response_bytes \(1048576 bytes\)") as info:
            client.supported_models()
        took = time.monotonic() - start
        client.close()
    assert not isinstance(info.value, rlnb.APIConnectionError)  # refused, not retried until the deadline
    assert took < 18 and len(sent) == 1  # one request, not retried until the 20 s deadline
    assert sent[0] < 32 << 20  # the server was cut off (socket buffers hold a few MB), not read to the end
    if declared is not None:
        assert sent[0] <= 16 << 20


def test_bodies_within_the_cap_are_read_whole_and_the_default_cap_fits_large_results():
    body = json.dumps({"data": [{"base_model": "m" * 1000, "default_gpu_type": "B200-SXM"}] * 200}).encode()
    with APIClient(
        BASE, KEY, transport=httpx.MockTransport(lambda r: httpx.Response(200, content=body)),
        max_response_bytes=len(body),
    ) as client:  # fmt: skip
        assert len(client.supported_models().data) == 200
    assert APIClient(BASE).max_response_bytes == bodies.MAX_RESPONSE_BYTES == 256 << 20
    with pytest.raises(ValueError, match="max_response_bytes must be None or an integer >= 1"):
        APIClient(BASE, max_response_bytes=0)


def test_an_error_body_past_the_cap_is_refused_too():
    big = httpx.Response(502, content=b"x" * 5000)
    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(lambda r: big), retry=QUICK, max_response_bytes=4096) as c,
        pytest.raises(rlnb.APIError, match="502 response body is larger than max_response_bytes"),
    ):
        c.supported_models()


def test_a_small_answer_over_a_socket_is_read_whole_under_a_small_cap():
    """The streamed read over a real socket (not a mock transport) ends at the body's end."""

    def answer(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
        write_response(conn, httpx.Response(200, json={"data": []}))

    with Loopback(answer) as server, APIClient(server.url, KEY, retry=QUICK, max_response_bytes=64) as client:
        assert client.supported_models().data == []


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_an_error_status_message_with_terminal_escapes_is_shown_escaped_its_lines_kept(as_json):
    """A hostile (or broken) server's error message went into the exception raw: printed, ``\\x1b[2J`` cleared the
    terminal and ``\\u202e`` turned the rest around. Its control characters are shown as escapes; the line breaks
    and tabs of a plain-text error page stay lines."""
    said = "bad\x1b[2J\x1b]0;owned\x07 input\u202e\nsecond line\tend"

    def answer(request: httpx.Request) -> httpx.Response:
        if as_json:
            return httpx.Response(400, json={"error": {"message": said}})
        return httpx.Response(400, text=said)

    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(answer), retry=QUICK) as client,
        pytest.raises(rlnb.APIError) as info,
    ):
        client.get_session("s")
    message = str(info.value)
    assert "\\x1b[2J" in message and "\\x07" in message and "\\u202e" in message, message
    assert "\x1b" not in message and "\x07" not in message and "\u202e" not in message
    assert "\nsecond line\tend" in message
