"""The remote backend: Together's RL training-session API (R-new, SDK ``together`` 3.1.1) over httpx.

Two layers:

* ``APIClient`` / ``AsyncAPIClient``: thin clients, one method per endpoint, over a swappable httpx
  transport. They retry what is safe to retry (no response, 408, 409, 429, >= 500, or whatever
  ``x-should-retry`` says) with jittered exponential backoff that honours ``Retry-After``, and turn
  every failure into an ``rlnb._exceptions`` error in one place. Each operation POST carries one
  ``Idempotency-Key``, made before the first attempt and reused on every retry, so a retried
  submission never runs twice.
* ``RemoteBackend``: the ``Backend`` a ``Session`` drives. It POSTs each operation before returning,
  so the server sees operations in submission order, and one poller thread follows every in-flight
  operation with an adaptive interval (see ``poll_interval``), reporting each status change.

The API key lives in a ``SecretStr`` and is written only into the ``Authorization`` header: it is in
no repr, log line, exception message or history record, and server text is scrubbed of it too.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, SecretStr, ValidationError

from rlnb import wire
from rlnb._exceptions import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    OperationTimeout,
    RlnbError,
    SessionClosed,
    status_error_class,
)
from rlnb.backends import Listener, OptimizerKind

log = logging.getLogger("rlnb")

# ---------------------------------------------------------------------------------------------
# Constants (every tunable number of this module)

DEFAULT_BASE_URL = "https://api.together.ai"
"""Used when neither ``base_url`` nor ``$TOGETHER_BASE_URL`` is given (the SDK's default)."""
ENV_BASE_URL = "TOGETHER_BASE_URL"
ENV_API_KEY = "TOGETHER_API_KEY"
API_PREFIX = "/v1/rl"
USER_AGENT = "rlnb"

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
"""Per HTTP request (the SDK's): operations are asynchronous, so no request should take long."""
DEFAULT_MAX_RETRIES = 5
INITIAL_RETRY_DELAY = 0.5
"""Backoff before retry n (0-based) is min(INITIAL_RETRY_DELAY * 2**n, MAX_RETRY_DELAY) * jitter."""
MAX_RETRY_DELAY = 8.0
RETRY_JITTER = 0.25
"""The backoff is multiplied by a factor in (1 - RETRY_JITTER, 1], so clients do not retry in step."""
MAX_RETRY_AFTER = 60.0
"""A server's ``Retry-After`` is obeyed when 0 < value <= this; otherwise the backoff applies."""
RETRY_STATUSES = frozenset({408, 409, 429})
"""Retried besides every status >= 500: request timeout, lock conflict, rate limit / session cap."""

POLL_MIN = 0.01
"""Seconds between the first polls of an operation (or of a resource / session being started)."""
POLL_MAX = 2.0
"""The longest gap between two polls."""
POLL_FRACTION = 0.1
"""Poll again after this fraction of the time already spent in the current status (see poll_interval)."""
OPERATION_TIMEOUT = 3600.0
"""Seconds after submission at which the poller gives an operation up (reported FAILED, TIMEOUT)."""
READY_TIMEOUT = 1800.0
"""Seconds ``RemoteBackend.connect`` waits for the model resource, then the session, to be up."""

MUON_SCALING: dict[str, str] = {
    "original": "MUON_SCALING_STRATEGY_ORIGINAL",
    "match_adam": "MUON_SCALING_STRATEGY_MATCH_ADAM",
}
"""Short names accepted for ``muon_scaling`` (the full enum strings are accepted too)."""

RESOURCE_READY = "MODEL_RESOURCES_STATUS_READY"
RESOURCE_DEAD = frozenset(
    {"MODEL_RESOURCES_STATUS_ERROR", "MODEL_RESOURCES_STATUS_STOPPED", "MODEL_RESOURCES_STATUS_STOPPING"}
)
SESSION_RUNNING = "TRAINING_SESSION_STATUS_RUNNING"
SESSION_DEAD = frozenset(
    {
        "TRAINING_SESSION_STATUS_STOPPED",
        "TRAINING_SESSION_STATUS_STOPPING",
        "TRAINING_SESSION_STATUS_ERROR",
        "TRAINING_SESSION_STATUS_EXPIRED",
    }
)
_FAILED = "TRAINING_OPERATION_STATUS_FAILED"
_ERR = "TRAINING_OPERATION_ERROR_CODE_"

_ENVELOPES: dict[str, type[wire.Operation[Any]]] = {
    kind: wire.Operation[result]  # type: ignore[valid-type]
    for kind, result in wire.RESULT_TYPES.items()
}
"""The typed envelope of each operation kind: ``output`` parses to the kind's result model."""

M = TypeVar("M", bound=BaseModel)


def retryable_status(status_code: int) -> bool:
    """Whether an error status is worth retrying when the server does not say (``x-should-retry``)."""
    return status_code in RETRY_STATUSES or status_code >= 500


def poll_interval(elapsed: float, poll_min: float = POLL_MIN, poll_max: float = POLL_MAX) -> float:
    """Seconds until the next poll, after ``elapsed`` seconds in the current status.

    A fixed fraction of the time already waited, clamped to [poll_min, poll_max]: a quick operation is
    seen within ``poll_min``, a long one costs a logarithmic number of requests, and the report lags
    the real finish by at most ~``POLL_FRACTION`` of the time spent (or ``poll_max``).
    """
    return min(max(POLL_FRACTION * elapsed, poll_min), poll_max)


# ---------------------------------------------------------------------------------------------
# The clients


class _Call(NamedTuple):
    """One endpoint call, independent of sync or async I/O."""

    method: str
    path: str
    model: type[BaseModel]
    body: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    idempotency_key: str | None = None


def _seg(value: str, name: str) -> str:
    """One path segment, escaped; an empty id would silently address a different endpoint."""
    if not value:
        raise ValueError(f"expected a non-empty {name}, got {value!r}")
    return quote(str(value), safe="")


def _operations_path(session_id: str, kind: str) -> str:
    if kind not in _ENVELOPES:
        raise ValueError(f"unknown operation kind {kind!r}: one of {', '.join(_ENVELOPES)}")
    return f"/training-sessions/{_seg(session_id, 'session_id')}/operations/{kind}"


class _BaseClient:
    """Everything but I/O: URLs, headers, the retry decision and delay, response -> model / error."""

    _http: httpx.Client | httpx.AsyncClient
    _owns_http: bool

    def __init__(self, base_url: str | None, api_key: str | None, max_retries: int):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = (base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        self._api_key = SecretStr(key) if key else None
        self.max_retries = max_retries

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.base_url} max_retries={self.max_retries}>"

    @staticmethod
    def _make_http(
        cls: type[httpx.Client] | type[httpx.AsyncClient],
        http_client: Any,
        transport: Any,
        timeout: float | httpx.Timeout,
    ) -> tuple[Any, bool]:
        if http_client is not None and transport is not None:
            raise ValueError("pass http_client or transport, not both")
        if http_client is not None:
            return http_client, False
        return cls(transport=transport, timeout=timeout), True

    # -- endpoints (shared by both clients) ------------------------------------------------------

    @staticmethod
    def _supported_models() -> _Call:
        return _Call("GET", "/supported-models", wire.SupportedModels)

    @staticmethod
    def _create_model_resources(request: wire.CreateModelResourcesRequest) -> _Call:
        return _Call("POST", "/model-resources", wire.ModelResources, request.to_json_dict())

    @staticmethod
    def _get_model_resources(model_resources_id: str) -> _Call:
        return _Call("GET", f"/model-resources/{_seg(model_resources_id, 'model_resources_id')}", wire.ModelResources)

    @staticmethod
    def _stop_model_resources(model_resources_id: str, force: bool) -> _Call:
        path = f"/model-resources/{_seg(model_resources_id, 'model_resources_id')}/stop"
        return _Call("POST", path, wire.ModelResources, params={"force": "true" if force else "false"})

    @staticmethod
    def _create_session(request: wire.StartTrainingSessionRequest) -> _Call:
        return _Call("POST", "/training-sessions", wire.Session, request.to_json_dict())

    @staticmethod
    def _get_session(session_id: str) -> _Call:
        return _Call("GET", f"/training-sessions/{_seg(session_id, 'session_id')}", wire.Session)

    @staticmethod
    def _stop_session(session_id: str) -> _Call:
        return _Call("POST", f"/training-sessions/{_seg(session_id, 'session_id')}/stop", wire.Session)

    @staticmethod
    def _submit_operation(session_id: str, kind: str, body: wire._Model | None, idempotency_key: str | None) -> _Call:
        json_body = body.to_json_dict() if body is not None else {}
        key = idempotency_key or str(uuid.uuid4())
        return _Call("POST", _operations_path(session_id, kind), _ENVELOPES[kind], json_body, idempotency_key=key)

    @staticmethod
    def _get_operation(session_id: str, kind: str, operation_id: str) -> _Call:
        path = f"{_operations_path(session_id, kind)}/{_seg(operation_id, 'operation_id')}"
        return _Call("GET", path, _ENVELOPES[kind])

    # -- request / response ----------------------------------------------------------------------

    def _build(self, call: _Call) -> httpx.Request:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        if call.idempotency_key is not None:
            headers["Idempotency-Key"] = call.idempotency_key
        return self._http.build_request(
            call.method, f"{self.base_url}{API_PREFIX}{call.path}", json=call.body, params=call.params, headers=headers
        )

    def _redact(self, text: str) -> str:
        """``text`` without the API key (a server or proxy may echo the header back)."""
        return text.replace(self._api_key.get_secret_value(), "***") if self._api_key is not None else text

    def _should_retry(self, response: httpx.Response) -> bool:
        """The server's ``x-should-retry: true|false`` if sent, else ``retryable_status``."""
        header = response.headers.get("x-should-retry")
        if header in ("true", "false"):
            return header == "true"
        return retryable_status(response.status_code)

    def _retry_delay(self, attempt: int, headers: httpx.Headers | None) -> float:
        """Seconds before retry number ``attempt`` (0-based): ``retry-after-ms`` / ``Retry-After``
        (seconds or an HTTP date) when 0 < value <= MAX_RETRY_AFTER, else jittered backoff."""
        asked = _retry_after(headers) if headers is not None else None
        if asked is not None and 0 < asked <= MAX_RETRY_AFTER:
            return asked
        return min(INITIAL_RETRY_DELAY * 2.0**attempt, MAX_RETRY_DELAY) * (1 - RETRY_JITTER * random.random())

    def _after_failure(
        self, request: httpx.Request, attempt: int, response: httpx.Response | None, error: Exception | None
    ) -> float:
        """The one place failures are judged: the delay before the next attempt, or the final error raised.

        ``error`` is the httpx exception when no response came; it becomes ``APITimeoutError`` or
        ``APIConnectionError`` (``from`` it). An error status becomes ``status_error_class(status)``.
        """
        method, url = request.method, str(request.url)
        if response is not None:
            retry = self._should_retry(response)
            what = f"{response.status_code} {response.reason_phrase}"
        else:
            retry = True
            what = f"{type(error).__name__}: {self._redact(str(error)) or 'no response'}"
        if not retry or attempt >= self.max_retries:
            if response is not None:
                raise self._status_error(request, response)
            cls = APITimeoutError if isinstance(error, httpx.TimeoutException) else APIConnectionError
            tries = f" (after {attempt + 1} attempts)" if attempt else ""
            raise cls(what + tries, method=method, url=url) from error
        delay = self._retry_delay(attempt, response.headers if response is not None else None)
        log.info("%s %s: %s; retry %d of %d in %.2f s", method, url, what, attempt + 1, self.max_retries, delay)
        return delay

    def _status_error(self, request: httpx.Request, response: httpx.Response) -> APIStatusError:
        """The exception for an error status, with the server's message and decoded body."""
        text = self._redact(response.text)
        try:
            data = wire.ErrorData.model_validate_json(text)
        except ValidationError:
            message, body = (text.strip()[:500] or response.reason_phrase), text or None
        else:
            message, body = data.error.message, data.model_dump(mode="json")
        cls = status_error_class(response.status_code)
        return cls(message, method=request.method, url=str(request.url), status_code=response.status_code, body=body)

    def _parse(self, request: httpx.Request, response: httpx.Response, model: type[M]) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            message = f"{response.status_code} response is not a valid {model.__name__}: {self._redact(str(exc))}"
            raise APIError(message, method=request.method, url=str(request.url)) from None

    def _log(self, request: httpx.Request, response: httpx.Response, started: float) -> None:
        elapsed_ms = (time.monotonic() - started) * 1000
        log.debug("%s %s -> %d in %.0f ms", request.method, request.url, response.status_code, elapsed_ms)


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked to wait, or None when it did not (or said nothing parsable)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) * scale
        except ValueError:
            if name == "retry-after" and (when := email.utils.parsedate_tz(value)) is not None:
                return email.utils.mktime_tz(when) - time.time()
    return None


class APIClient(_BaseClient):
    """Synchronous client of the RL training-session API.

    Args:
        base_url: e.g. ``https://api.together.ai`` or ``http://127.0.0.1:8000`` (``rlnb serve``);
            default ``$TOGETHER_BASE_URL``, then ``DEFAULT_BASE_URL``. Paths are under ``/v1/rl``.
        api_key: sent as ``Authorization: Bearer``; default ``$TOGETHER_API_KEY`` (none: no header).
        timeout: per request; ignored when ``http_client`` is given (its own applies).
        max_retries: retries after the first attempt (0 = never retry).
        http_client / transport: inject an ``httpx.Client``, or a transport for a client built here
            (``httpx.MockTransport`` in tests). A given ``http_client`` is not closed by ``close()``.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        super().__init__(base_url, api_key, max_retries)
        self._http, self._owns_http = self._make_http(httpx.Client, http_client, transport, timeout)

    def __enter__(self) -> APIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def _send(self, call: _Call) -> Any:
        request = self._build(call)
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                response = self._http.send(request)  # type: ignore[union-attr]
            except httpx.RequestError as exc:
                time.sleep(self._after_failure(request, attempt, None, exc))
            else:
                self._log(request, response, started)
                if response.is_success:
                    return self._parse(request, response, call.model)
                time.sleep(self._after_failure(request, attempt, response, None))
            attempt += 1

    def supported_models(self) -> wire.SupportedModels:
        return self._send(self._supported_models())

    def create_model_resources(self, request: wire.CreateModelResourcesRequest) -> wire.ModelResources:
        return self._send(self._create_model_resources(request))

    def get_model_resources(self, model_resources_id: str) -> wire.ModelResources:
        return self._send(self._get_model_resources(model_resources_id))

    def stop_model_resources(self, model_resources_id: str, *, force: bool = True) -> wire.ModelResources:
        """Stop a resource; ``force`` also stops the sessions attached to it (else the call fails)."""
        return self._send(self._stop_model_resources(model_resources_id, force))

    def create_session(self, request: wire.StartTrainingSessionRequest) -> wire.Session:
        return self._send(self._create_session(request))

    def get_session(self, session_id: str) -> wire.Session:
        return self._send(self._get_session(session_id))

    def stop_session(self, session_id: str) -> wire.Session:
        return self._send(self._stop_session(session_id))

    def submit_operation(
        self, session_id: str, kind: str, body: wire._Model | None, *, idempotency_key: str | None = None
    ) -> wire.Operation[Any]:
        """POST one operation; returns its envelope (usually PENDING) at once. A fresh uuid4
        ``Idempotency-Key`` is used unless given; every retry of this call reuses it."""
        return self._send(self._submit_operation(session_id, kind, body, idempotency_key))

    def get_operation(self, session_id: str, kind: str, operation_id: str) -> wire.Operation[Any]:
        return self._send(self._get_operation(session_id, kind, operation_id))


class AsyncAPIClient(_BaseClient):
    """The ``APIClient`` for asyncio: same arguments (``http_client`` an ``httpx.AsyncClient``,
    ``transport`` an async transport), same methods, awaited; ``aclose()`` instead of ``close()``."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        super().__init__(base_url, api_key, max_retries)
        self._http, self._owns_http = self._make_http(httpx.AsyncClient, http_client, transport, timeout)

    async def __aenter__(self) -> AsyncAPIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()  # type: ignore[union-attr]

    async def _send(self, call: _Call) -> Any:
        request = self._build(call)
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                response = await self._http.send(request)  # type: ignore[misc]
            except httpx.RequestError as exc:
                await asyncio.sleep(self._after_failure(request, attempt, None, exc))
            else:
                self._log(request, response, started)
                if response.is_success:
                    return self._parse(request, response, call.model)
                await asyncio.sleep(self._after_failure(request, attempt, response, None))
            attempt += 1

    async def supported_models(self) -> wire.SupportedModels:
        return await self._send(self._supported_models())

    async def create_model_resources(self, request: wire.CreateModelResourcesRequest) -> wire.ModelResources:
        return await self._send(self._create_model_resources(request))

    async def get_model_resources(self, model_resources_id: str) -> wire.ModelResources:
        return await self._send(self._get_model_resources(model_resources_id))

    async def stop_model_resources(self, model_resources_id: str, *, force: bool = True) -> wire.ModelResources:
        return await self._send(self._stop_model_resources(model_resources_id, force))

    async def create_session(self, request: wire.StartTrainingSessionRequest) -> wire.Session:
        return await self._send(self._create_session(request))

    async def get_session(self, session_id: str) -> wire.Session:
        return await self._send(self._get_session(session_id))

    async def stop_session(self, session_id: str) -> wire.Session:
        return await self._send(self._stop_session(session_id))

    async def submit_operation(
        self, session_id: str, kind: str, body: wire._Model | None, *, idempotency_key: str | None = None
    ) -> wire.Operation[Any]:
        return await self._send(self._submit_operation(session_id, kind, body, idempotency_key))

    async def get_operation(self, session_id: str, kind: str, operation_id: str) -> wire.Operation[Any]:
        return await self._send(self._get_operation(session_id, kind, operation_id))


# ---------------------------------------------------------------------------------------------
# The backend


@dataclass
class _InFlight:
    kind: str
    listener: Listener
    env: wire.Operation[Any]
    deadline: float
    """time.monotonic() past which the poller gives up."""
    changed: float
    """time.monotonic() of the last status change (or the submission)."""
    due: float
    """time.monotonic() of the next poll."""


def _failed(code: str | None, message: str, op_id: str = "") -> wire.Operation[Any]:
    return wire.Operation(id=op_id, status=_FAILED, error=wire.OperationError(code=code, message=message))


def _optimizer_of(resource: wire.ModelResources) -> OptimizerKind:
    return "muon" if resource.optimizer_config.muon is not None else "adam"


def _wait_until(
    fetch: Callable[[], M], ready: str, dead: frozenset[str], timeout: float, poll_min: float, poll_max: float
) -> M:
    """Poll ``fetch()`` until its status is ``ready``, with ``poll_interval`` backoff (not a fixed 10 s).

    Raises ``SessionClosed`` (a session) or ``RlnbError`` (a model resource) on a dead status, and
    ``OperationTimeout`` after ``timeout`` seconds.
    """
    start = time.monotonic()
    while True:
        obj: Any = fetch()
        if obj.status == ready:
            return obj
        if obj.status in dead:
            detail = f": {obj.error.code}: {obj.error.message}" if obj.error is not None else ""
            cls = SessionClosed if isinstance(obj, wire.Session) else RlnbError
            raise cls(f"{type(obj).__name__} {obj.id} is {obj.status}{detail}")
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            raise OperationTimeout(f"{type(obj).__name__} {obj.id} still {obj.status} after {timeout:.0f} s")
        time.sleep(min(poll_interval(elapsed, poll_min, poll_max), timeout - elapsed))


def _lora(lora: bool | dict[str, Any] | wire.LoraConfig | None) -> wire.LoraConfig | None:
    if isinstance(lora, wire.LoraConfig):
        return lora
    if isinstance(lora, dict):
        return wire.LoraConfig.model_validate(lora)
    return None


def _optimizer_config(optimizer: str, muon_scaling: str | None) -> wire.OptimizerConfig:
    if optimizer == "adam":
        if muon_scaling is not None:
            raise ValueError("muon_scaling applies to optimizer='muon' only")
        return wire.OptimizerConfig(adam=wire.AdamOptimizerConfig())
    if muon_scaling is None:
        return wire.OptimizerConfig(muon=wire.MuonOptimizerConfig())
    strategy = MUON_SCALING.get(muon_scaling, muon_scaling)
    return wire.OptimizerConfig(muon=wire.MuonOptimizerConfig(scaling_strategy=strategy))  # type: ignore[arg-type]


class RemoteBackend:
    """One training session of the remote API. Build it with ``RemoteBackend.connect`` (or
    ``rlnb.connect(url, ...)``); the constructor takes a running session and its model resource,
    whose ``optimizer_config`` fixes ``optimizer``.

    ``submit`` POSTs the operation (with retries) before returning, so operations reach the server
    in submission order; one daemon thread polls everything in flight. ``close()`` stops the session
    and, when ``stop_resource``, the model resource too.
    """

    def __init__(
        self,
        client: APIClient,
        session: wire.Session,
        resource: wire.ModelResources,
        *,
        stop_resource: bool = False,
        poll_min: float = POLL_MIN,
        poll_max: float = POLL_MAX,
        operation_timeout: float = OPERATION_TIMEOUT,
    ):
        if not 0 < poll_min <= poll_max:
            raise ValueError(f"need 0 < poll_min <= poll_max, got {poll_min}, {poll_max}")
        if operation_timeout <= 0:
            raise ValueError(f"operation_timeout must be > 0, got {operation_timeout}")
        self.optimizer: OptimizerKind = _optimizer_of(resource)
        self.client = client
        self.resource = resource
        self.session_id = session.id
        self.stop_resource = stop_resource
        self.poll_min, self.poll_max, self.operation_timeout = poll_min, poll_max, operation_timeout
        self._info = session
        self._inflight: list[_InFlight] = []
        self._cond = threading.Condition()
        self._closed = False
        self._stopping = False
        self._poller = threading.Thread(target=self._poll_loop, name=f"rlnb-poll-{session.id}", daemon=True)
        self._poller.start()

    def __repr__(self) -> str:
        return f"<RemoteBackend {self.client.base_url} session={self.session_id} optimizer={self.optimizer}>"

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        session_id: str | None = None,
        model_resources_id: str | None = None,
        base_model: str | None = None,
        optimizer: OptimizerKind | None = None,
        lora: bool | dict[str, Any] | wire.LoraConfig | None = None,
        num_generator_replicas: int = 1,
        muon_scaling: str | None = None,
        resume_from_checkpoint_id: str | None = None,
        load_optimizer: bool | None = None,
        display_name: str | None = None,
        keep_resource: bool = False,
        ready_timeout: float = READY_TIMEOUT,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        poll_min: float = POLL_MIN,
        poll_max: float = POLL_MAX,
        operation_timeout: float = OPERATION_TIMEOUT,
    ) -> RemoteBackend:
        """Attach to a session, or start one (and, unless given, its model resource) and wait until it runs.

        * ``session_id``: attach to that session; its optimizer is read from its model resource.
        * ``model_resources_id``: start a session on that existing resource.
        * neither: create a model resource for ``base_model`` (default: the first supported model)
          with ``optimizer`` (default ``"adam"``; ``muon_scaling`` ``"original"`` | ``"match_adam"``),
          ``num_generator_replicas`` and ``lora`` (None/False: full weights; True: LoRA with server
          defaults; a dict / ``wire.LoraConfig``: LoRA with that config), then a session on it.

        ``close()`` stops the session, and the model resource only when this call created it and
        ``keep_resource`` is false: an existing resource is never stopped. If anything fails or is
        interrupted while starting, what was created is stopped again. An ``optimizer`` that differs
        from an existing resource's raises ``ValueError``. Waiting polls quickly at first, backing
        off to ``poll_max``, for up to ``ready_timeout`` seconds each for resource and session.
        """
        if optimizer not in (None, "adam", "muon"):
            raise ValueError(f"optimizer must be 'adam' or 'muon', got {optimizer!r}")
        if session_id is not None:
            extra = {
                "model_resources_id": model_resources_id,
                "base_model": base_model,
                "lora": lora,
                "muon_scaling": muon_scaling,
                "resume_from_checkpoint_id": resume_from_checkpoint_id,
                "load_optimizer": load_optimizer,
                "display_name": display_name,
            }
            given = [name for name, value in extra.items() if value is not None]
            if given:
                raise ValueError(f"{', '.join(given)} describe a new session; they cannot be used with session_id")
        client = APIClient(
            base_url, api_key, timeout=timeout, max_retries=max_retries, http_client=http_client, transport=transport
        )

        def wait(fetch: Callable[[], M], ready: str, dead: frozenset[str]) -> M:
            return _wait_until(fetch, ready, dead, ready_timeout, poll_min, poll_max)

        created_resource: str | None = None
        created_session: str | None = None
        try:
            if session_id is not None:
                info = client.get_session(session_id)
                resource = client.get_model_resources(info.model_resources_id)
            elif model_resources_id is not None:
                resource = client.get_model_resources(model_resources_id)
            else:
                if base_model is None:
                    models = client.supported_models().data
                    if not models:
                        raise RlnbError(f"{client.base_url} lists no supported models; pass base_model")
                    base_model = models[0].base_model
                resource = client.create_model_resources(
                    wire.CreateModelResourcesRequest(
                        base_model=base_model,
                        lora_enabled=lora is not None and lora is not False,
                        compute_config=wire.ComputeConfigRequest(num_generator_replicas=num_generator_replicas),
                        optimizer_config=_optimizer_config(optimizer or "adam", muon_scaling),
                    )
                )
                created_resource = resource.id
                log.info("created model resource %s (%s)", resource.id, resource.base_model)
            if optimizer is not None and optimizer != _optimizer_of(resource):
                raise ValueError(
                    f"model resource {resource.id} uses {_optimizer_of(resource)}, not {optimizer} "
                    "(the optimizer is fixed when the resource is created)"
                )
            if session_id is None:
                resource_id = resource.id
                resource = wait(lambda: client.get_model_resources(resource_id), RESOURCE_READY, RESOURCE_DEAD)
                fields = {
                    "model_resources_id": resource_id,
                    "display_name": display_name,
                    "lora_config": _lora(lora),
                    "resume_from_checkpoint_id": resume_from_checkpoint_id,
                    "load_optimizer": load_optimizer,
                }  # only what was given is sent: unset means the server's default
                info = client.create_session(
                    wire.StartTrainingSessionRequest(**{k: v for k, v in fields.items() if v is not None})
                )
                created_session = info.id
                log.info("started training session %s on %s", info.id, resource_id)
            sid = info.id
            info = wait(lambda: client.get_session(sid), SESSION_RUNNING, SESSION_DEAD)
        except BaseException:  # also KeyboardInterrupt: never leave a paid resource running
            _stop_quietly(client, created_session, created_resource)
            client.close()
            raise
        return cls(
            client,
            info,
            resource,
            stop_resource=created_resource is not None and not keep_resource,
            poll_min=poll_min,
            poll_max=poll_max,
            operation_timeout=operation_timeout,
        )

    # -- Backend protocol ------------------------------------------------------------------------

    def submit(self, kind: str, body: wire._Model | None, listener: Listener) -> None:
        """POST the operation now (retrying), report its envelope, and poll it until it ends.

        A POST that finally fails is reported FAILED to ``listener`` (so the history shows it) and
        raised; nothing is queued.
        """
        if self._closed:
            listener(_failed(_ERR + "SESSION_NOT_ACTIVE", "the session is stopped"))
            return
        try:
            env = self.client.submit_operation(self.session_id, kind, body)
        except APIError as exc:
            listener(_failed(None, str(exc)))
            raise
        listener(env)
        if env.status in wire.TERMINAL_STATUSES:
            return
        now = time.monotonic()
        op = _InFlight(kind, listener, env, now + self.operation_timeout, now, now + self.poll_min)
        with self._cond:
            if not self._closed:  # else close() ran meanwhile and no longer polls: settle it here
                self._inflight.append(op)
                self._cond.notify()
                return
        listener(_failed(_ERR + "SESSION_NOT_ACTIVE", "the session was closed before this finished", env.id))

    def session(self) -> wire.Session:
        """The session as the API's GET returns it now; after ``close()``, as the stop returned it."""
        if not self._closed:
            self._info = self.client.get_session(self.session_id)
        return self._info

    def config(self) -> dict[str, Any]:
        """The run's description for ``config.json``: where, which session and resource, model,
        optimizer, LoRA. No API key."""
        muon = self.resource.optimizer_config.muon
        lora = self._info.lora_config
        return {
            "backend": "remote",
            "base_url": self.client.base_url,
            "session_id": self.session_id,
            "model_resources_id": self.resource.id,
            "model": self._info.base_model,
            "optimizer": self.optimizer,
            "muon_scaling": muon.scaling_strategy if muon is not None else None,
            "lora": lora.to_json_dict() if lora is not None else (True if self.resource.lora_enabled else None),
            "num_generator_replicas": self.resource.compute_config.num_generator_replicas,
            "resume_from": self._info.resume_from_checkpoint_id,
        }

    def close(self) -> None:
        """Stop the session, settle what is in flight, then stop the model resource if
        ``stop_resource``. Every step is tried; the first API error is raised at the end."""
        with self._cond:
            if self._closed:
                return
            self._closed = self._stopping = True
            self._cond.notify_all()
        self._poller.join()
        errors: list[APIError] = []
        try:
            self._info = self.client.stop_session(self.session_id)
        except APIError as exc:
            errors.append(exc)
        self._settle()
        if self.stop_resource:
            try:
                self.client.stop_model_resources(self._info.model_resources_id)
            except APIError as exc:
                errors.append(exc)
        self.client.close()
        if errors:
            raise errors[0]

    # -- polling ---------------------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = time.monotonic()
                    due = [op for op in self._inflight if op.due <= now]
                    if due:
                        break
                    self._cond.wait(min(op.due for op in self._inflight) - now if self._inflight else None)
            for op in due:
                if self._stopping:
                    return
                self._poll(op)

    def _poll(self, op: _InFlight) -> None:
        try:
            env = self.client.get_operation(self.session_id, op.kind, op.env.id)
        except (APIConnectionError, APIStatusError) as exc:
            if isinstance(exc, APIStatusError) and not retryable_status(exc.status_code):
                env = _failed(None, f"polling failed: {exc}", op.env.id)
            else:
                log.warning("polling %s %s failed, will try again: %s", op.kind, op.env.id, exc)
                env = op.env
        except APIError as exc:  # an unparsable response: not worth repeating
            env = _failed(None, f"polling failed: {exc}", op.env.id)
        now = time.monotonic()
        if env.status not in wire.TERMINAL_STATUSES and now >= op.deadline:
            env = _failed(
                _ERR + "TIMEOUT",
                f"rlnb stopped waiting after {self.operation_timeout:g} s (operation_timeout); the operation "
                f"was last {op.env.status} and the server may still finish it",
                op.env.id,
            )
        if env.status != op.env.status:
            op.env, op.changed = env, now
            self._report(op, env)
        if env.status in wire.TERMINAL_STATUSES:
            with self._cond:
                self._inflight.remove(op)
        else:
            op.due = min(now + poll_interval(now - op.changed, self.poll_min, self.poll_max), op.deadline)

    def _settle(self) -> None:
        """After the stop: one last poll of each operation still in flight; unfinished ones end
        FAILED (SESSION_NOT_ACTIVE), as on the local backend."""
        for op in self._inflight:
            try:
                env = self.client.get_operation(self.session_id, op.kind, op.env.id)
            except APIError:
                env = op.env
            if env.status not in wire.TERMINAL_STATUSES:
                env = _failed(_ERR + "SESSION_NOT_ACTIVE", "the session was closed before this finished", op.env.id)
            self._report(op, env)
        self._inflight.clear()

    def _report(self, op: _InFlight, env: wire.Operation[Any]) -> None:
        try:
            op.listener(env)
        except Exception:  # a listener's bug must not stop the poller for every other operation
            log.exception("listener of %s %s raised", op.kind, op.env.id)


def _stop_quietly(client: APIClient, session_id: str | None, model_resources_id: str | None) -> None:
    """Best-effort cleanup after a failed start; the original error is the one worth raising."""
    for stop, target in ((client.stop_session, session_id), (client.stop_model_resources, model_resources_id)):
        if target is not None:
            try:
                stop(target)
            except APIError as exc:
                log.warning("could not stop %s after a failed start: %s", target, exc)
