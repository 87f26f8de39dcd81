"""Credentials are masked as the request that carries them is sent, not as an ``http_client`` held them when rlnb's
client was made: a header or cookie set on it later, a cookie the server sets, a default query key, what an ``auth=``
flow (Digest, a custom ``httpx.Auth``) writes, a key shorter than 16 characters. Each was echoed unmasked by a server
that quotes the request (its URL, its headers) in an error, a redirect or a transport's own exception."""

import base64
import logging
import re
import socket
import threading
import warnings
from collections.abc import Callable, Iterator

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from rlnb.secrets import redaction
from tests.support.fake_api import BASE
from tests.support.hostile import Loopback, write_response


def echo(request: httpx.Request) -> httpx.Response:
    """A server that answers 400 quoting the request's URL and headers."""
    said = f"bad request {request.url}; headers were {dict(request.headers)}"
    return httpx.Response(400, json={"error": {"message": said, "type": "invalid_request_error"}})


def said_by(http: httpx.Client, then: Callable[[httpx.Client], None] = lambda http: None) -> str:
    """The text of the error of a call through ``http``, ``then`` having changed ``http`` after rlnb's client was
    made."""
    with http, APIClient(BASE, http_client=http, max_retries=0) as api:
        then(http)
        with pytest.raises(Exception) as info:  # noqa: PT011 - the types differ by case; each is checked below
            api.get_session("s1")
    assert isinstance(info.value, rlnb.APIError | RuntimeError), info.value
    return str(info.value)


LATER: dict[str, Callable[[httpx.Client, str], None]] = {
    "a header": lambda http, secret: http.headers.update({"X-Api-Key": secret}),
    "an authorization": lambda http, secret: http.headers.update({"Authorization": f"Bearer {secret}"}),
    "a cookie": lambda http, secret: http.cookies.set("session", secret),
}


@pytest.mark.parametrize("how", LATER)
def test_a_credential_set_on_the_http_client_after_rlnb_made_its_client_is_masked(how):
    secret = f"set-later-{how.replace(' ', '-')}-0123456789"
    said = said_by(httpx.Client(transport=httpx.MockTransport(echo)), lambda http: LATER[how](http, secret))
    assert secret not in said and "***" in said, said


def test_a_cookie_the_server_sets_is_masked_in_that_answer_and_the_next():
    secret = "server-set-session-0123456789"
    answers = iter([httpx.Response(401, headers={"Set-Cookie": f"session={secret}; Path=/; HttpOnly"},
                                   json={"error": {"message": f"new session {secret}", "type": "auth"}})])  # fmt: skip
    http = httpx.Client(transport=httpx.MockTransport(lambda request: next(answers, None) or echo(request)))
    with http, APIClient(BASE, http_client=http, max_retries=0) as api:
        with pytest.raises(rlnb.AuthenticationError) as first:
            api.get_session("s0")
        with pytest.raises(rlnb.BadRequestError) as second:
            api.get_session("s1")
    assert "new session ***" in str(first.value)
    assert secret not in str(second.value) and "session=***" in str(second.value)


def test_a_credential_shorter_than_16_characters_is_masked_where_its_name_says_it_is_one():
    """A gateway's 10-character ``X-Api-Key``, a 12-character Bearer token, a short session cookie: each is a
    credential by its name, as rlnb's own key of 8 characters or more is. A cookie whose name says nothing keeps the
    16-character rule (``consent=accepted`` masks no word), as does a header that is no credential."""
    headers = {"X-Api-Key": "gw-key-42x", "Authorization": "Bearer tok-12345678",
               "Cookie": "sid=s3ss-0042; consent=accepted; theme=dark-mode-2", "X-Team": "research-lab"}  # fmt: skip
    said = said_by(httpx.Client(transport=httpx.MockTransport(echo), headers=headers))
    assert not any(short in said for short in ("gw-key-42x", "tok-12345678", "s3ss-0042")), said
    assert all(word in said for word in ("accepted", "dark-mode-2", "research-lab")), said


def test_a_default_query_key_is_masked_in_an_echoed_url_and_the_debug_log(caplog):
    caplog.set_level(logging.DEBUG, logger="rlnb")
    secret = "query-api-key-0123456789"
    answers = iter([httpx.Response(200, json={"data": []})])
    http = httpx.Client(transport=httpx.MockTransport(lambda request: next(answers, None) or echo(request)),
                        params={"api_key": secret, "tenant": "acme-research"})  # fmt: skip
    with http, APIClient(BASE, http_client=http, max_retries=0) as api:
        api.supported_models()
        with pytest.raises(rlnb.BadRequestError) as info:
            api.get_session("s1")
    assert "api_key=***" in str(info.value) and "tenant=acme-research" in str(info.value), str(info.value)
    assert secret not in str(info.value) and secret not in caplog.text and "api_key=***" in caplog.text


class Signer(httpx.Auth):
    """A custom auth flow that signs each request with a header whose name says nothing of a credential."""

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        request.headers["X-Sig"] = "sig-v1-0123456789abcdef"
        yield request


def test_what_a_custom_auth_flow_writes_is_masked():
    said = said_by(httpx.Client(transport=httpx.MockTransport(echo), auth=Signer()))
    assert "sig-v1-0123456789abcdef" not in said and "'x-sig': '***'" in said, said


def test_what_digest_auth_writes_is_masked():
    """Digest's ``Authorization`` is written in the flow's second round, from the server's challenge: its
    ``response`` proves the password, and was echoed unmasked (the header whole, and alone)."""
    sent: list[str] = []

    def digest(request: httpx.Request) -> httpx.Response:
        if "authorization" not in request.headers:
            challenge = 'Digest realm="api", nonce="n0nce-9f8e7d", qop="auth", algorithm=MD5'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        sent.append(request.headers["authorization"])
        proof = re.search(r'response="(\w+)"', sent[-1]).group(1)  # type: ignore[union-attr]
        return httpx.Response(400, json={"error": {"message": f"{sent[-1]} / {proof}", "type": "auth"}})

    said = said_by(httpx.Client(transport=httpx.MockTransport(digest), auth=httpx.DigestAuth("alice", "pa55word")))
    proof = re.search(r'response="(\w+)"', sent[0]).group(1)  # type: ignore[union-attr]
    assert proof not in said and sent[0] not in said and said.endswith("/ ***"), said


def test_a_transports_own_error_quoting_a_header_set_later_is_masked():
    secret = "set-later-transport-0123456789"

    def refuse(request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"refused {dict(request.headers)}")

    said = said_by(httpx.Client(transport=httpx.MockTransport(refuse)),
                   lambda http: http.headers.update({"Authorization": f"Bearer {secret}"}))  # fmt: skip
    assert said.startswith("refused") and secret not in said and "'authorization': 'Bearer ***'" in said, said


def test_a_redirect_to_an_address_that_quotes_a_header_set_later_is_masked():
    secret = "set-later-location-0123456789"

    def moved(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": f"https://other.test/{request.headers['x-api-key']}/x"})

    said = said_by(httpx.Client(transport=httpx.MockTransport(moved)),
                   lambda http: http.headers.update({"X-Api-Key": secret}))  # fmt: skip
    assert "redirects to https://other.test/***/x" in said and secret not in said, said


def test_credentials_seen_on_requests_are_kept_to_the_latest_few_hundred():
    """A load balancer's cookie changes with every answer (``AWSALB``): each value was a credential kept for the life
    of the process, and every text redacted against all of them. The latest ``SEEN_LIMIT`` are kept; a key given to
    rlnb is kept for ever."""
    rounds = iter(range(redaction.SEEN_LIMIT + 20))

    def rotate(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": []}, headers={"Set-Cookie": f"AWSALB=lb-{next(rounds):06d}-012345"})

    http = httpx.Client(transport=httpx.MockTransport(rotate))
    with http, APIClient(BASE, http_client=http, max_retries=0) as api:
        for _ in range(redaction.SEEN_LIMIT + 20):
            api.supported_models()
    known = redaction.known()
    assert f"lb-{redaction.SEEN_LIMIT + 19:06d}-012345" in known and "lb-000000-012345" not in known
    assert sum(key.startswith("lb-") for key in known) <= redaction.SEEN_LIMIT


def test_a_basic_auth_password_quoted_decoded_is_masked():
    """A gateway that says which password it refused: Basic auth sends it base64-encoded, and it was masked only
    so."""
    secret = "basic-pass-0123"

    def refuse(request: httpx.Request) -> httpx.Response:
        user, _, password = base64.b64decode(request.headers["authorization"].split()[-1]).decode().partition(":")
        return httpx.Response(401, json={"error": {"message": f"wrong password {password} for {user}", "type": "a"}})

    said = said_by(httpx.Client(transport=httpx.MockTransport(refuse), auth=("alice", secret)))
    assert said.endswith("wrong password *** for alice"), said


@pytest.mark.slow  # a server
def test_the_credentials_of_the_proxy_the_environment_names_are_masked(monkeypatch):
    """httpcore writes the proxy's ``Proxy-Authorization`` (Basic, from ``HTTP_PROXY``'s user info) past every hook:
    a proxy that answered quoting the request's headers put it in the error."""
    password = "proxy-pass-0123456789"

    def quote_headers(conn: socket.socket, request: httpx.Request, stop: threading.Event) -> None:
        said = f"proxy refused {dict(request.headers)} ({password})"
        write_response(conn, httpx.Response(400, json={"error": {"message": said, "type": "proxy"}}))

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with Loopback(quote_headers) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", f"http://alice:{password}@"))
        with warnings.catch_warnings():  # a key to a plain http:// host: the cleartext warning, not tested here
            warnings.simplefilter("ignore")
            api = APIClient("http://api.rl.test", max_retries=0)
        with api, pytest.raises(rlnb.BadRequestError) as info:
            api.supported_models()
    basic = base64.b64encode(f"alice:{password}".encode()).decode()
    said = str(info.value)
    assert "'proxy-authorization': 'Basic ***'" in said and "(***) (through the proxy http://***@127" in said, said
    assert password not in said and basic not in said


@pytest.mark.slow  # a server
def test_a_cookie_the_server_sets_is_masked_in_httpcores_debug_line_of_that_answer(caplog):
    """httpcore logs an answer's headers (DEBUG) before any hook of httpx's sees them: the first ``Set-Cookie`` of a
    session cookie was printed whole, the next ones masked."""
    caplog.set_level(logging.DEBUG)
    secret = "server-session-in-log-0123456789"

    def set_cookie(conn: socket.socket, request: httpx.Request, stop: threading.Event) -> None:
        answer = httpx.Response(200, json={"data": []}, headers={"Set-Cookie": f"session={secret}; Path=/"})
        write_response(conn, answer)

    with Loopback(set_cookie) as server, APIClient(server.url, max_retries=0) as api:
        api.supported_models()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("httpcore") and "set-cookie" in r.getMessage()]
    assert lines and all("b'session=***; Path=/'" in line for line in lines), lines
    assert secret not in caplog.text


def test_the_idempotency_key_rlnb_writes_is_no_credential():
    """``Idempotency-Key`` holds the word ``key``: read as a credential, each operation's key was masked where a server
    names it ("duplicate idempotency key ...") and took a place among the credentials kept."""
    idempotency = "idem-0123456789abcdef"
    http = httpx.Client(transport=httpx.MockTransport(echo))
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.BadRequestError) as info:
        api.submit_operation("s1", rlnb.wire.OperationKind.WEIGHTS_SYNC, None, idempotency_key=idempotency)
    assert f"'idempotency-key': '{idempotency}'" in str(info.value) and idempotency not in redaction.known()
