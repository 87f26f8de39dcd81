"""A traceback that shows every frame's locals (pytest ``--showlocals``, IPython's verbose mode, rich's
``show_locals``) printed the API key from ``rlnb.connect``'s ``options`` and ``RemoteBackend.connect``'s and
``APIClient``'s ``api_key``: rlnb wraps it in a ``SecretStr`` where it first receives it, and unwraps it only into
the ``Authorization`` header. Each failure below is raised from deep inside a real ``connect``, and its traceback
is rendered from rlnb's first frame on (the caller's own frame holds what the caller wrote)."""

import socket
import threading
import traceback
from collections.abc import Callable

import httpcore
import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI
from tests.support.tracebacks import with_locals


def deep_failure(request: httpx.Request) -> httpx.Response:
    """The fake API, but the session's create fails inside the transport (after the resource was created)."""
    if request.method == "POST" and request.url.path.endswith("/training-sessions"):
        raise RuntimeError("the transport broke")
    return FAKE(request)


FAKE = FakeAPI()


def refused_port() -> str:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def raise_in_transport() -> None:
    rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(deep_failure), record=False, **FAST_POLL)


def raise_without_a_server() -> None:
    rlnb.connect(refused_port(), api_key=KEY, base_model="m", max_retries=0, record=False)


def raise_in_the_clients_constructor() -> None:
    APIClient(BASE, api_key=KEY, deadline=-1.0)  # its repr is read while it is half built


def raise_in_the_clients_options() -> None:
    rlnb.connect(BASE, api_key=KEY, deadline=-1.0, record=False)  # ClientOptions checks it, as APIClient does


def raise_in_the_backends_connect() -> None:
    from rlnb.remote.backend import RemoteBackend

    RemoteBackend.connect(BASE, KEY, transport=httpx.MockTransport(deep_failure), **FAST_POLL)


def raise_in_the_keys_check() -> None:
    rlnb.connect(BASE, api_key=KEY + "\n", transport=httpx.MockTransport(deep_failure), record=False)


FAILURES: dict[str, tuple[Callable[[], None], type[BaseException], str]] = {
    "in the transport": (raise_in_transport, RuntimeError, "rlnb/remote/backend.py"),
    "no server": (raise_without_a_server, rlnb.APIConnectionError, "rlnb/remote/calls.py"),
    "APIClient()": (raise_in_the_clients_constructor, ValueError, "rlnb/remote/calls.py"),
    "ClientOptions()": (raise_in_the_clients_options, ValueError, "rlnb/remote/call_spec.py"),
    "RemoteBackend.connect": (raise_in_the_backends_connect, RuntimeError, "rlnb/remote/backend.py"),
    "a key with a newline": (raise_in_the_keys_check, ValueError, "rlnb/secrets/redaction.py"),
}


@pytest.mark.parametrize("fail", FAILURES.values(), ids=FAILURES.keys())
@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_no_frames_locals_show_the_api_key(fail):
    raise_it, error, deepest = fail
    with pytest.raises(error) as info:
        raise_it()
    text = with_locals(info.value)
    assert deepest in text and "api_key = SecretStr('**********')" in text  # rlnb's frames, with their locals
    assert KEY not in text


def test_a_key_from_the_environment_is_in_no_frames_locals(monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", KEY + "\n")  # read from a file
    with pytest.raises(ValueError, match="TOGETHER_API_KEY holds whitespace") as info:
        APIClient(BASE)
    text = with_locals(info.value)
    assert "key = SecretStr('**********')" in text and KEY not in text


def test_a_secret_str_is_taken_as_the_key_and_sent_in_the_header():
    """A ``SecretStr`` (pydantic-settings hands keys out so) is taken as a str is; the header carries the key."""
    from pydantic import SecretStr

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(200, json={"data": []})

    with APIClient(BASE, SecretStr(KEY), transport=httpx.MockTransport(handler)) as client:
        client.supported_models()
        assert KEY not in repr(vars(client))
    assert seen == [f"Bearer {KEY}"]


def test_a_sweep_or_find_lr_refused_up_front_shows_no_key_in_its_locals():
    """``rlnb.sweep`` and ``rlnb.sweep.lr_find`` hold ``connect``'s options for their trials: a refusal before any
    trial (an unknown option, a bad range) printed the key from their frames' ``options``."""
    from rlnb.sweep import grid, lr_find, sweep

    with pytest.raises(TypeError, match="unexpected keyword argument") as info:
        sweep(rlnb.AdamParams(), grid(learning_rate=[1e-3]), steps=1, target=BASE, api_key=KEY, no_such_option=1)
    assert KEY not in with_locals(info.value)
    with pytest.raises(ValueError, match="start_lr") as info:
        lr_find(rlnb.AdamParams(), target=BASE, api_key=KEY, start_lr=-1.0)
    assert KEY not in with_locals(info.value)


def test_an_operation_whose_post_fails_outside_httpx_keeps_no_key_in_its_error(tmp_path):
    """A transport (a proxy library, a custom one) that raises an error of its own quoting the request's headers: the
    sender failed the operation with that text as written, so the key stood in ``OperationFailed``, the history
    and the run folder on disk."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/forward-backward"):
            raise RuntimeError(f"proxy refused the request with headers {dict(request.headers)}")
        return FAKE(request)

    session = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), runs_dir=tmp_path, **FAST_POLL)
    op = session.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])])
    with pytest.raises(rlnb.OperationFailed, match="could not be sent: RuntimeError: proxy refused") as info:
        op.result(10)
    session.close()
    assert "Bearer ***" in str(info.value) and KEY not in str(info.value)
    on_disk = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert "proxy refused" in on_disk and KEY not in on_disk


def test_a_logged_traceback_whose_error_quotes_the_key_is_scrubbed(caplog):
    """The poller logs an unexpected polling error with its traceback (``log.exception``): a transport's error that
    quotes the request's headers printed the key on stderr, rlnb's ``RedactingFilter`` being opt-in and the
    traceback outside the message it scrubbed."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and "/forward-backward/" in request.url.path:
            raise RuntimeError(f"proxy refused the request with headers {dict(request.headers)}")
        return FAKE(request)

    session = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), record=False, **FAST_POLL)
    op = session.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])])
    with pytest.raises(rlnb.OperationFailed, match="polling failed: RuntimeError: proxy refused"):
        op.result(10)
    session.close()
    assert "Traceback" in caplog.text and "proxy refused the request" in caplog.text
    assert "Bearer ***" in caplog.text and KEY not in caplog.text


def _answering(answer: bytes) -> str:
    """A real socket server that reads each request and sends ``answer`` (b"": closes at once) then closes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            with conn:
                if answer:
                    conn.recv(65536)
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.slow  # IPython's and rich's renderings of a long chain with every frame's locals: ~2 s
@pytest.mark.parametrize("answer", [b"garbage\r\n\r\n", b""], ids=["garbage", "closed"])
def test_an_h11_failure_over_a_real_socket_shows_no_key_in_any_frames_locals(answer):
    """h11 and httpcore hold the request's headers while they send it (h11's ``Request`` event, whose repr lists
    them): a server that answers garbage or closes the connection raises through their frames, and the chained
    errors keep those frames. No frame rlnb's error chains to holds the key, nor does any message."""
    with pytest.raises(rlnb.APIConnectionError) as info, APIClient(_answering(answer), KEY, max_retries=0) as client:
        client.supported_models()
    assert "httpcore" in with_locals(info.value)  # the chained frames, with their locals
    assert KEY not in with_locals(info.value) and KEY not in "".join(traceback.format_exception(info.value))


@pytest.mark.slow  # IPython's and rich's renderings of a long chain with every frame's locals: ~2 s
def test_an_error_while_httpcore_writes_the_headers_shows_no_key_in_any_frames_locals(monkeypatch):
    """httpcore's ``_send_request_headers`` frame holds h11's ``Request`` event (whose repr lists the headers) and
    ``_send_event``'s the bytes it writes: an error raised while they are written (a write timeout on a peer that reads
    nothing) printed the key from the chained cause's frames. rlnb drops the locals of the frames its chained errors
    passed through (their lines stay)."""
    from httpcore._backends.sync import SyncStream

    write = SyncStream.write

    def stalled(self: SyncStream, buffer: bytes, timeout: float | None = None) -> None:
        if b"authorization" in buffer.lower():
            raise httpcore.WriteTimeout("timed out writing the request headers")
        write(self, buffer, timeout)

    monkeypatch.setattr(SyncStream, "write", stalled)
    with pytest.raises(rlnb.APITimeoutError) as info, APIClient(_answering(b""), KEY, max_retries=0) as client:
        client.supported_models()
    text = with_locals(info.value)
    assert "_send_request_headers" in text and "in stalled" in text  # the chained frames are rendered
    assert KEY not in text


@pytest.mark.slow  # IPython's and rich's renderings of a long chain with every frame's locals: ~2 s
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_non_httpx_error_while_httpcore_writes_the_headers_shows_no_key_in_any_frames_locals(monkeypatch, error):
    """An error that is not httpx's (a network stream's own bug, Ctrl-C) raised while httpcore writes the headers
    escapes as it is, past the retries: it left h11's ``Request`` event and the bytes written in the locals of the
    frames it passed through, as a ``WriteTimeout`` did before rlnb dropped them."""
    from httpcore._backends.sync import SyncStream

    write = SyncStream.write

    def broken(self: SyncStream, buffer: bytes, timeout: float | None = None) -> None:
        if b"authorization" in buffer.lower():
            raise error("the stream broke writing the request headers")
        write(self, buffer, timeout)

    monkeypatch.setattr(SyncStream, "write", broken)
    with pytest.raises(error, match="the stream broke") as info, APIClient(_answering(b""), KEY) as client:
        client.supported_models()
    text = with_locals(info.value)
    assert "_send_request_headers" in text and "in broken" in text  # the frames are rendered, locals and all
    assert KEY not in text
