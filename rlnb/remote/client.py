"""``APIClient``: the retrying HTTP client of Together's RL training-session API (R-new, SDK 3.1.1).

One method per endpoint, over a swappable httpx transport. Every request goes through ``_send``, which
applies the one ``RetryPolicy`` (no response, 408, 409, 429, >= 500, or whatever ``x-should-retry``
says; jittered exponential backoff honouring ``Retry-After``) and turns every failure into an
``rlnb.errors`` error. Each operation POST carries one ``Idempotency-Key``, made before the first
attempt and reused on every retry, so a retried submission never runs twice.

Large bodies go through the payload side channel exactly as the official SDK sends them (``payloads``),
and results that name a ``payload_id`` are fetched and merged before they are parsed. The client also
learns what the server offers beyond the API (rlnb serve's long-poll and in-order execution, from its
``rlnb-*`` response headers) in ``features``.

Every call ends by ``deadline`` seconds, all attempts and backoff included: each socket operation is
bounded by the time left (``transport.DeadlineTransport``), so a server that drips its answer cannot hold
a call for ever.

The API key lives in a ``SecretStr`` and is written only into the ``Authorization`` header: it is in no
repr, log line or exception message (the header of a request inside an exception rlnb raises reads
``Bearer ***``), and every body a server sends back, successful or not, is read under a size cap and
scrubbed of it after JSON decoding (``bodies``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, SecretStr

from rlnb import _secrets, wire
from rlnb.errors import APIConnectionError, APIError, APITimeoutError
from rlnb.remote import bodies, payloads
from rlnb.remote.retry import RetryPolicy
from rlnb.remote.transport import DeadlineTransport, deadline

log = logging.getLogger("rlnb")

DEFAULT_BASE_URL = "https://api.together.ai"
"""Used when neither ``base_url`` nor ``$TOGETHER_BASE_URL`` is given (the SDK's default)."""
ENV_BASE_URL = "TOGETHER_BASE_URL"
ENV_API_KEY = "TOGETHER_API_KEY"
API_PREFIX = "/v1/rl"
USER_AGENT = "rlnb"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
"""Per socket operation (the SDK's): operations are asynchronous, so no request should take long."""
DEFAULT_DEADLINE = 120.0
"""Seconds one API call may take in all — every attempt, retry backoff and byte of the answer (plus a
long-poll's wait): a server that drips its answer, or keeps failing, cannot hold a call longer."""


@dataclass(frozen=True)
class ClientOptions:
    """How a remote session talks HTTP: ``APIClient``'s keywords as one group (``rlnb.connect(url,
    deadline=30.0, ...)`` sets these by name; see ``APIClient`` for each)."""

    timeout: float | httpx.Timeout = field(default_factory=lambda: DEFAULT_TIMEOUT)
    deadline: float = DEFAULT_DEADLINE
    max_retries: int | None = None
    retry: RetryPolicy | None = None
    http_client: httpx.Client | None = None
    transport: httpx.BaseTransport | None = None
    server_extensions: bool = True
    max_response_bytes: int | None = None


M = TypeVar("M", bound=BaseModel)


@dataclass
class ServerFeatures:
    """What the server offers beyond Together's API, learned from its ``rlnb-*`` response headers."""

    long_poll_max_wait: float | None = None
    """``GET .../operations/{kind}/{id}?wait=S`` is served, for S up to this (rlnb serve)."""
    in_order: bool = False
    """A session's operations run one at a time in submission order (rlnb serve)."""


@dataclass(frozen=True)
class PreparedOperation:
    """An operation's request, encoded when it is submitted (a snapshot: the caller's objects may change
    afterwards) and sent later by the backend's sender thread."""

    kind: wire.OperationKind
    content: bytes
    """The POST body; with ``upload``, the inline stand-in without its ``payload_id``."""
    idempotency_key: str
    upload: bytes | None = None
    """What goes through the payload side channel first (a large body), or None."""
    inline: dict[str, Any] | None = None


class _Call(NamedTuple):
    method: str
    url: str
    """Absolute, or a path under ``API_PREFIX``."""
    content: bytes | None = None
    params: dict[str, str] | None = None
    idempotency_key: str | None = None
    auth: bool = True
    """False for presigned URLs: they must not see the key."""
    wait: float = 0.0
    """Seconds the server may hold the answer (long-poll): added to the read timeout."""


def _seg(value: str, name: str) -> str:
    """One path segment, escaped; an empty id would silently address a different endpoint."""
    if not value:
        raise ValueError(f"expected a non-empty {name}, got {value!r}")
    return quote(str(value), safe="")


def _operations_path(session_id: str, kind: wire.OperationKind) -> str:
    if kind not in wire.ENVELOPES:
        raise ValueError(f"unknown operation kind {kind!r}: one of {', '.join(wire.ENVELOPES)}")
    return f"/training-sessions/{_seg(session_id, 'session_id')}/operations/{kind}"


class APIClient:
    """Synchronous client of the RL training-session API.

    Args:
        base_url: e.g. ``https://api.together.ai`` or ``http://127.0.0.1:8000`` (``rlnb serve``);
            default ``$TOGETHER_BASE_URL``, then ``DEFAULT_BASE_URL``. Paths are under ``/v1/rl``.
        api_key: sent as ``Authorization: Bearer``; default ``$TOGETHER_API_KEY`` (none: no header).
        timeout: per socket operation; ignored when ``http_client`` is given (its own applies).
        deadline: seconds one call may take in all, retries included (plus a long-poll's wait). The
            transport built here enforces it inside a request too (a dripping server); a given
            ``http_client`` or ``transport`` only between attempts.
        max_retries / retry: the retry policy (``max_retries`` is a shortcut for ``RetryPolicy(max_retries)``).
        http_client / transport: inject an ``httpx.Client``, or a transport for a client built here
            (``httpx.MockTransport`` in tests). A given ``http_client`` is not closed by ``close()``.
        server_extensions: use what the server advertises beyond Together's API (rlnb serve's long-poll
            and in-order execution); False behaves exactly as against Together.
        max_response_bytes: the largest response body read (default ``bodies.MAX_RESPONSE_BYTES``,
            256 MiB); a larger one fails the call with ``APIError`` instead of filling the memory.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        deadline: float = DEFAULT_DEADLINE,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        server_extensions: bool = True,
        max_response_bytes: int | None = None,
    ):
        if not deadline > 0:
            raise ValueError(f"deadline must be > 0 seconds, got {deadline}")
        if http_client is not None and transport is not None:
            raise ValueError("pass http_client or transport, not both")
        if retry is not None and max_retries is not None:
            raise ValueError("pass retry or max_retries, not both")
        self.retry = retry or (RetryPolicy() if max_retries is None else RetryPolicy(max_retries=max_retries))
        self.base_url = (base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        self._api_key = SecretStr(key) if key else None
        if key:
            _secrets.register(key)
        self._bodies = bodies.Scrubber(key or None)
        self.max_response_bytes = bodies.MAX_RESPONSE_BYTES if max_response_bytes is None else max_response_bytes
        if self.max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be >= 1, got {self.max_response_bytes}")
        self.deadline = deadline
        self._owns_http = http_client is None
        if http_client is None:
            http_client = httpx.Client(transport=transport or DeadlineTransport(), timeout=timeout)
        self._http = http_client
        self.features = ServerFeatures()
        self.server_extensions = server_extensions

    @property
    def max_retries(self) -> int:
        return self.retry.max_retries

    def __repr__(self) -> str:
        return f"<APIClient {self.base_url} max_retries={self.max_retries}>"

    def __enter__(self) -> APIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    # -- endpoints -------------------------------------------------------------------------------

    def supported_models(self) -> wire.SupportedModels:
        return self._parse(self._send(_Call("GET", "/supported-models")), wire.SupportedModels)

    def create_model_resources(self, request: wire.CreateModelResourcesRequest) -> wire.ModelResources:
        return self._parse(self._send(_Call("POST", "/model-resources", _json(request))), wire.ModelResources)

    def get_model_resources(self, model_resources_id: str) -> wire.ModelResources:
        path = f"/model-resources/{_seg(model_resources_id, 'model_resources_id')}"
        return self._parse(self._send(_Call("GET", path)), wire.ModelResources)

    def stop_model_resources(self, model_resources_id: str, *, force: bool = True) -> wire.ModelResources:
        """Stop a resource; ``force`` also stops the sessions attached to it (else the call fails)."""
        path = f"/model-resources/{_seg(model_resources_id, 'model_resources_id')}/stop"
        call = _Call("POST", path, params={"force": "true" if force else "false"})
        return self._parse(self._send(call), wire.ModelResources)

    def create_session(self, request: wire.StartTrainingSessionRequest) -> wire.Session:
        return self._parse(self._send(_Call("POST", "/training-sessions", _json(request))), wire.Session)

    def get_session(self, session_id: str) -> wire.Session:
        path = f"/training-sessions/{_seg(session_id, 'session_id')}"
        return self._parse(self._send(_Call("GET", path)), wire.Session)

    def stop_session(self, session_id: str) -> wire.Session:
        path = f"/training-sessions/{_seg(session_id, 'session_id')}/stop"
        return self._parse(self._send(_Call("POST", path)), wire.Session)

    def submit_operation(
        self, session_id: str, kind: wire.OperationKind, body: wire._Model | None, *, idempotency_key: str | None = None
    ) -> wire.Operation[Any]:
        """POST one operation; returns its envelope (usually PENDING) at once. A fresh uuid4
        ``Idempotency-Key`` is used unless given; every retry of this call reuses it. A body over
        ``wire.LARGE_PAYLOAD_BYTES`` of a side-channel kind is uploaded first, as the SDK does."""
        return self.send_operation(session_id, self.prepare_operation(kind, body, idempotency_key))

    def prepare_operation(
        self, kind: wire.OperationKind, body: wire._Model | None, idempotency_key: str | None = None
    ) -> PreparedOperation:
        """Encode an operation now (a bad kind or a NaN raises here, before anything is sent)."""
        if kind not in wire.ENVELOPES:
            raise ValueError(f"unknown operation kind {kind!r}: one of {', '.join(wire.ENVELOPES)}")
        kind = wire.OperationKind(kind)
        data = body.to_json_dict() if body is not None else {}
        content = payloads.compact(data)
        key = idempotency_key or str(uuid.uuid4())
        if kind in wire.OFFLOADED_KINDS and len(content) > wire.LARGE_PAYLOAD_BYTES:
            upload, inline = payloads.split(kind, data)
            return PreparedOperation(kind, payloads.compact(inline), key, payloads.compact(upload), inline)
        return PreparedOperation(kind, content, key)

    def send_operation(self, session_id: str, op: PreparedOperation) -> wire.Operation[Any]:
        """Send a prepared operation (its upload first, if any); its envelope."""
        content = op.content
        if op.upload is not None and op.inline is not None:
            content = payloads.compact({**op.inline, "payload_id": self.upload_payload(session_id, op.upload)})
        call = _Call("POST", _operations_path(session_id, op.kind), content, idempotency_key=op.idempotency_key)
        return self._operation(session_id, op.kind, self._send(call))

    def get_operation(
        self,
        session_id: str,
        kind: wire.OperationKind,
        operation_id: str,
        *,
        wait: float | None = None,
        seen: str | None = None,
    ) -> wire.Operation[Any]:
        """GET one operation. ``wait``/``seen`` use rlnb serve's long-poll (see ``features``): the answer
        comes when the status differs from ``seen``, the operation ends, or ``wait`` seconds pass."""
        path = f"{_operations_path(session_id, kind)}/{_seg(operation_id, 'operation_id')}"
        params = {"wait": f"{wait:g}", **({"seen": seen} if seen else {})} if wait else None
        return self._operation(session_id, kind, self._send(_Call("GET", path, params=params, wait=wait or 0.0)))

    def upload_payload(self, session_id: str, content: bytes) -> str:
        """The side channel's upload: a presigned URL from the API, then a PUT without the key."""
        path = f"/training-sessions/{_seg(session_id, 'session_id')}/payloads/upload-url"
        url = self._parse(self._send(_Call("POST", path)), wire.PayloadUploadUrl)
        self._send(_Call("PUT", url.upload_url, content, auth=False))
        return url.payload_id

    def download_payload(self, session_id: str, payload_id: str) -> dict[str, Any]:
        """The side channel's download: a presigned URL from the API, then a GET without the key."""
        path = f"/training-sessions/{_seg(session_id, 'session_id')}/payloads/{_seg(payload_id, 'payload_id')}"
        url = self._parse(self._send(_Call("POST", path + "/download-url")), wire.PayloadDownloadUrl)
        data = self._bodies.decode(self._send(_Call("GET", url.download_url, auth=False)), "payload")
        if not isinstance(data, dict):
            raise APIError(f"payload {payload_id} must be a JSON object, got {type(data).__name__}")
        return data

    # -- request / response ----------------------------------------------------------------------

    def _operation(self, session_id: str, kind: wire.OperationKind, response: httpx.Response) -> wire.Operation[Any]:
        """The typed envelope; an output naming a ``payload_id`` gets the offloaded members merged in
        (downloaded keys win, as in the SDK)."""
        model = wire.ENVELOPES[kind]
        data = self._bodies.decode(response, model.__name__)
        output = data.get("output") if isinstance(data, dict) else None
        if isinstance(output, dict) and output.get("payload_id"):
            inline = {k: v for k, v in output.items() if k != "payload_id"}
            data["output"] = {**inline, **self.download_payload(session_id, str(output["payload_id"]))}
        return self._bodies.validate(response, data, model)

    def _send(self, call: _Call) -> httpx.Response:
        """Send with the retry policy, within the call's deadline; a 2xx response, or the mapped exception."""
        request = self._build(call)
        end = time.monotonic() + self.deadline + call.wait
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                with deadline(end):
                    response = self._http.send(request, stream=True)
                    try:
                        bodies.read(response, self.max_response_bytes)
                    finally:
                        response.close()
            except httpx.RequestError as exc:
                time.sleep(self._after_failure(request, attempt, None, exc, end))
            else:
                log.debug(
                    "%s %s -> %d in %.0f ms", request.method, request.url, response.status_code,
                    (time.monotonic() - started) * 1000,
                )  # fmt: skip
                self._learn(response)
                if response.is_success:
                    return response
                time.sleep(self._after_failure(request, attempt, response, None, end))
            attempt += 1

    def _build(self, call: _Call) -> httpx.Request:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if call.auth and self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        if call.idempotency_key is not None:
            headers["Idempotency-Key"] = call.idempotency_key
        if call.content is not None:
            headers["Content-Type"] = "application/json"
        url = call.url if call.url.startswith(("http://", "https://")) else f"{self.base_url}{API_PREFIX}{call.url}"
        timeout = self._http.timeout
        if call.wait:  # the server may hold a long-poll that long: the read deadline starts after it
            timeout = httpx.Timeout(timeout.read, connect=timeout.connect, read=(timeout.read or 0) + call.wait)
        return self._http.build_request(
            call.method, url, content=call.content, params=call.params, headers=headers, timeout=timeout
        )

    def _learn(self, response: httpx.Response) -> None:
        if not self.server_extensions:
            return
        wait = response.headers.get("rlnb-long-poll-max-wait")
        if wait is not None:
            with contextlib.suppress(ValueError):  # an unparsable header: no long-poll
                self.features.long_poll_max_wait = float(wait)
        if response.headers.get("rlnb-in-order") == "session":
            self.features.in_order = True

    def redact(self, text: str) -> str:
        """``text`` without any API key (a server or proxy may echo the header back)."""
        return self._bodies.redact(text)

    def _after_failure(
        self,
        request: httpx.Request,
        attempt: int,
        response: httpx.Response | None,
        error: Exception | None,
        end: float,
    ) -> float:
        """The one place failures are judged: the delay before the next attempt, or the final error raised.

        ``error`` is the httpx exception when no response came; it becomes ``APITimeoutError`` or
        ``APIConnectionError`` (``from`` it, with the request's Authorization header masked). An error
        status becomes ``status_error_class(status)``. No retry starts past the call's deadline ``end``.
        """
        method, url = request.method, self.redact(str(request.url.copy_with(query=None)))
        if response is not None:
            retry = self.retry.should_retry(response)
            what = f"{response.status_code} {response.reason_phrase}"
        else:
            retry = True
            what = f"{type(error).__name__}: {self.redact(str(error)) or 'no response'}"
        delay = self.retry.delay(attempt, response.headers if response is not None else None)
        late = time.monotonic() + delay >= end
        if not retry or attempt >= self.retry.max_retries or late:
            if "Authorization" in request.headers:  # the cause of what we raise keeps this request
                request.headers["Authorization"] = f"Bearer {_secrets.MASK}"
            if response is not None:
                raise self._bodies.status_error(request, response)
            cls = APITimeoutError if late or isinstance(error, httpx.TimeoutException) else APIConnectionError
            tries = f" (after {attempt + 1} attempts)" if attempt else ""
            if late:
                tries += f"; the call's deadline ({self.deadline:g} s) passed"
            raise cls(what + tries, method=method, url=url) from error
        log.info("%s %s: %s; retry %d of %d in %.2f s", method, url, what, attempt + 1, self.retry.max_retries, delay)
        return delay

    def _parse(self, response: httpx.Response, model: type[M]) -> M:
        return self._bodies.parse(response, model)


def _json(model: wire._Model) -> bytes:
    return payloads.compact(model.to_json_dict())
