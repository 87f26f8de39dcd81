"""Which headers written after ``Caller._build`` are credentials: what an ``auth=`` flow writes (a signer's ``X-Sig``)
unless its name says it is a date, an id, a trace or a digest, and what a request hook writes only where its name says
so. Every header added after build was one: a hook's request id, a gateway's routing tag and SigV4's ``X-Amz-Date``
masked the user's messages and the API's own data (a session's ``base_model`` read ``***``), for the whole process."""

import datetime
import hashlib
import uuid
from collections.abc import Iterator

import httpx
import pytest

import rlnb
from rlnb.remote import sent
from rlnb.remote.client import APIClient
from rlnb.secrets import redaction
from tests.support.fake_api import BASE, KEY, FakeAPI


def test_a_request_id_a_hook_adds_is_no_credential():
    """A hook's per-request id, which the server asks the user to quote: it was masked, and each took a place among
    the credentials kept (a hook alone filled the store)."""
    ids: list[str] = []

    def add_id(request: httpx.Request) -> None:
        ids.append(f"req-{uuid.uuid4().hex[:12]}")
        request.headers["X-Request-Id"] = ids[-1]

    def server(request: httpx.Request) -> httpx.Response:
        said = f"internal error; quote request {request.headers['x-request-id']} to support"
        return httpx.Response(500, json={"error": {"message": said, "type": "server_error"}})

    http = httpx.Client(transport=httpx.MockTransport(server), event_hooks={"request": [add_id]})
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    assert f"quote request {ids[0]} to support" in str(info.value), str(info.value)
    assert not set(ids) & set(redaction.known())


def test_a_routing_tag_a_hook_adds_leaves_the_apis_data_as_it_is():
    """A gateway's routing tag naming the model: masked, it made the session's ``base_model`` read ``***``."""
    fake = FakeAPI()
    sid = fake.add_session(fake.add_resource({"type": "adamw"}))

    def tag(request: httpx.Request) -> None:
        request.headers["X-Route-Model"] = fake.sessions[sid]["base_model"]

    http = httpx.Client(transport=httpx.MockTransport(fake), event_hooks={"request": [tag]})
    with http, APIClient(BASE, api_key=KEY, http_client=http, max_retries=0) as api:
        first, second = api.get_session(sid), api.get_session(sid)
    assert first.base_model == second.base_model == fake.sessions[sid]["base_model"] != "***"


def test_a_credential_a_hook_adds_is_masked_where_its_name_says_so():
    def add_key(request: httpx.Request) -> None:
        request.headers["X-Gateway-Token"] = "hook-token-0123456789"

    def echo(request: httpx.Request) -> httpx.Response:
        said = f"bad request; headers were {dict(request.headers)}"
        return httpx.Response(400, json={"error": {"message": said, "type": "invalid_request_error"}})

    http = httpx.Client(transport=httpx.MockTransport(echo), event_hooks={"request": [add_key]})
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    assert "hook-token-0123456789" not in str(info.value) and "'x-gateway-token': '***'" in str(info.value)


class SigV4Like(httpx.Auth):
    """An ``auth=`` flow that signs as AWS SigV4 does: a date, a digest of the body, and the signature."""

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        request.headers["X-Amz-Date"] = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        request.headers["X-Amz-Content-Sha256"] = hashlib.sha256(request.content).hexdigest()
        request.headers["X-Amz-Security-Token"] = "session-token-0123456789"
        request.headers["Authorization"] = (
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/execute-api/aws4_request, "
            f"SignedHeaders=host;x-amz-date, Signature={'ab' * 32}"
        )
        yield request


def test_the_date_and_digest_an_auth_flow_writes_are_no_credentials_its_signature_is():
    """API Gateway's clock-skew answer quotes ``X-Amz-Date``: it read ``Signature expired: *** is now earlier ...``,
    and the digest of an empty body was masked everywhere."""

    def server(request: httpx.Request) -> httpx.Response:
        said = (f"Signature expired: {request.headers['x-amz-date']} is now earlier than 20261207T090000Z; "
                f"signature {'ab' * 32}, token {request.headers['x-amz-security-token']}")  # fmt: skip
        return httpx.Response(403, json={"error": {"message": said, "type": "auth"}})

    http = httpx.Client(transport=httpx.MockTransport(server), auth=SigV4Like())
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    said = str(info.value)
    assert "Signature expired: ***" not in said and "signature ***, token ***" in said, said
    empty = hashlib.sha256(b"").hexdigest()
    assert redaction.redact(empty) == empty


def test_masking_goes_on_after_the_user_replaces_the_http_clients_event_hooks():
    """httpx's ``event_hooks = {...}`` setter drops rlnb's hooks: a key set on the client after it was shown whole."""

    def echo(request: httpx.Request) -> httpx.Response:
        said = f"bad request; headers were {dict(request.headers)}"
        return httpx.Response(400, json={"error": {"message": said, "type": "invalid_request_error"}})

    http = httpx.Client(transport=httpx.MockTransport(echo))
    with http, APIClient(BASE, http_client=http, max_retries=0) as api:
        http.event_hooks = {"request": [lambda request: None], "response": []}
        http.headers["X-Api-Key"] = "late-key-0123456789"
        with pytest.raises(rlnb.APIError) as info:
            api.get_session("s1")
    assert "late-key-0123456789" not in str(info.value) and "'x-api-key': '***'" in str(info.value), str(info.value)


def test_a_credential_named_in_camel_case_or_run_together_is_masked():
    """``accessToken``, ``X-AuthToken``, a cookie ``authToken``: split only at ``-_.``, each name was one word that
    is no credential word, and the value was shown whole (no ``CleartextKeyWarning`` either)."""

    def echo(request: httpx.Request) -> httpx.Response:
        said = f"bad request {request.url}; headers were {dict(request.headers)}"
        return httpx.Response(400, json={"error": {"message": said, "type": "invalid_request_error"}})

    secrets = {"tok-abcdef123", "hdr-abcdef123", "ck-abcdef12", "api-abcdef123", "x-apikey-0123"}
    http = httpx.Client(transport=httpx.MockTransport(echo), params={"accessToken": "tok-abcdef123",
                        "apiToken": "api-abcdef123", "maxTokens": "max-tokens-512", "pageSize": "page-size-64"},
                        headers={"X-AuthToken": "hdr-abcdef123", "XApiKey": "x-apikey-0123"},
                        cookies={"authToken": "ck-abcdef12"})  # fmt: skip
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    said = str(info.value)
    assert not any(secret in said for secret in secrets), said
    assert "accessToken=***" in said and "'x-authtoken': '***'" in said and "authToken=***" in said, said
    assert "maxTokens=max-tokens-512" in said and "pageSize=page-size-64" in said, said


@pytest.mark.parametrize(
    ("name", "credential"),
    [("accessToken", True), ("X-AuthToken", True), ("apiToken", True), ("clientSecret", True), ("APIKey", True),
     ("xapikey", True), ("dbPassword", True), ("maxTokens", False), ("monkey", False), ("X-Api-KeyId", False),
     ("idempotencyKey", False), ("X-Request-Id", False)],
)  # fmt: skip
def test_credential_names_are_read_at_camel_case_boundaries(name, credential):
    assert sent.says_credential(name) is credential


@pytest.mark.parametrize("secret", ["key with space 123", "abc def~ghi!jkl*(0)"])
def test_a_query_key_with_a_space_is_masked_in_an_echoed_url(secret):
    """httpx writes a query's space as ``+``: the percent-encoded form (``%20``) was masked, not that one."""

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": f"bad request {request.url}", "type": "invalid"}})

    http = httpx.Client(transport=httpx.MockTransport(echo), params={"api_key": secret})
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    assert str(info.value).endswith("s1?api_key=***"), str(info.value)


def test_a_hooks_header_is_no_credential_in_a_second_round_of_an_auth_flow():
    """Digest sends the request again, the hook's header on it from the first round: it is still the hook's, not one
    the flow wrote (``sent.HOOKED``), though its name says nothing of what it is."""
    ids: list[str] = []

    def add_id(request: httpx.Request) -> None:
        ids.append(f"lab-{uuid.uuid4().hex[:12]}")
        request.headers["X-Team"] = ids[-1]

    def server(request: httpx.Request) -> httpx.Response:
        if "authorization" not in request.headers:
            challenge = 'Digest realm="api", nonce="n0nce-9f8e7d", qop="auth", algorithm=MD5'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        said = f"request {request.headers['x-team']}: {request.headers['authorization']}"
        return httpx.Response(400, json={"error": {"message": said, "type": "invalid_request_error"}})

    http = httpx.Client(transport=httpx.MockTransport(server), auth=httpx.DigestAuth("alice", "pa55word"),
                        event_hooks={"request": [add_id]})  # fmt: skip
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    assert f"request {ids[-1]}: Digest" in str(info.value) and 'response="***"' in str(info.value)
