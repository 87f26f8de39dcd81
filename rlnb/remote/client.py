"""``APIClient``: the retrying HTTP client of Together's RL training-session API (R-new, SDK 3.1.1).

One method per endpoint, over a swappable httpx transport: sessions and operations here, model resources in
``resources``, checkpoints and their downloads in ``checkpoints``, the payload side channel in ``payload_calls``
(its base classes). Every request goes through the send path of ``rlnb.remote.calls``: one ``RetryPolicy``, a
deadline per call, every failure an ``rlnb.errors`` error, and the API key in no repr, log line or message. Each
operation POST carries one ``Idempotency-Key``, made before the first attempt and reused on every retry, so a retried
submission never runs twice.

Large bodies go through the payload side channel exactly as the official SDK sends them (``payloads``),
and results that name a ``payload_id`` are fetched and merged before they are parsed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from rlnb import wire
from rlnb.errors import APIConnectionError, APIError
from rlnb.remote import payloads
from rlnb.remote.bodies import invalid
from rlnb.remote.call_spec import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, Call, check_settings
from rlnb.remote.checkpoints import CheckpointCalls
from rlnb.remote.endpoints import at, json_body, list_params, status_filter
from rlnb.remote.payload_calls import PayloadCalls, PayloadGone
from rlnb.remote.resources import ResourceCalls
from rlnb.remote.retry import RetryPolicy
from rlnb.wire import paths

log = logging.getLogger("rlnb")


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

    def __post_init__(self) -> None:
        """Checked when the group is built, as ``APIClient`` checks them, kept as plain numbers and a bool
        (``np.int64(2)`` becomes ``2``)."""
        given = (self.deadline, self.timeout, self.max_retries, self.server_extensions, self.max_response_bytes)
        for name, value in check_settings(*given)._asdict().items():
            object.__setattr__(self, name, value)


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
    accumulates: bool = False
    """Whether the server, running it, accumulates gradients for the next optim-step (``wire.accumulates``)."""


def _operations_path(session_id: str, kind: wire.OperationKind, operation_id: str | None = None) -> str:
    """Where operations of ``kind`` are submitted, or where the one ``operation_id`` is read."""
    if kind not in wire.ENVELOPES:
        raise ValueError(f"unknown operation kind {kind!r}: one of {', '.join(wire.ENVELOPES)}")
    if operation_id is None:
        return at(paths.OPERATIONS, session_id=session_id, kind=kind)
    return at(paths.OPERATION, session_id=session_id, kind=kind, operation_id=operation_id)


class APIClient(ResourceCalls, CheckpointCalls, PayloadCalls):
    """Synchronous client of the RL training-session API.

    Args:
        base_url: e.g. ``https://api.together.ai`` or ``http://127.0.0.1:8000`` (``rlnb serve``);
            default ``$TOGETHER_BASE_URL``, then ``call_spec.DEFAULT_BASE_URL``. Paths are under ``/v1/rl``.
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

    def __repr__(self) -> str:
        if "base_url" not in vars(self):  # a constructor that raised: its traceback's locals would crash the stdlib's
            return "<APIClient (not built)>"
        return f"<APIClient {self.base_url} max_retries={self.max_retries}>"

    def __enter__(self) -> APIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- endpoints -------------------------------------------------------------------------------

    def create_session(self, request: wire.StartTrainingSessionRequest) -> wire.Session:
        """Sent once it may have reached the server, as ``create_model_resources``."""
        call = Call("POST", paths.SESSIONS, json_body(request), idempotent=False)
        return self._parse(self._send(call), wire.Session)

    def list_sessions(
        self,
        *,
        model_resources_id: str | None = None,
        status: str | Iterable[str] | None = (),
        created_by: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> wire.SessionList:
        """One page of sessions, filtered as ``list_model_resources`` (``status``: ``wire.SessionStatus`` values;
        ``limit`` 1..100)."""
        params = list_params(
            limit, model_resources_id=model_resources_id, status=status_filter(status, wire.SessionStatus),
            created_by=created_by, after=after,
        )  # fmt: skip
        return self._parse(self._send(Call("GET", paths.SESSIONS, params=params)), wire.SessionList)

    def get_session(self, session_id: str) -> wire.Session:
        path = at(paths.SESSION, session_id=session_id)
        return self._one(self._send(Call("GET", path)), wire.Session, session_id)

    def update_session(
        self, session_id: str, *, display_name: str | None = None, metadata: wire.SessionMetadata | dict | None = None
    ) -> wire.Session:
        """PATCH a session's label or metadata: what is given is set (an empty string clears it), the rest is
        unchanged. Retried as any call: the same PATCH twice leaves the same session."""
        given = wire.given(display_name=display_name, metadata=metadata)
        if not given:
            raise ValueError("update_session needs display_name or metadata (or both): nothing would change")
        body = wire.validated(wire.UpdateSessionRequest, given, "update_session")
        if body.metadata is not None:  # a W&B field given None: left out, not ``null``
            body.metadata = body.metadata.sent()
        call = Call("PATCH", at(paths.SESSION, session_id=session_id), json_body(body))
        return self._one(self._send(call), wire.Session, session_id)

    def stop_session(self, session_id: str, *, reconnect_until: float | None = None) -> wire.Session:
        """``reconnect_until`` (a ``time.monotonic()``): a connection that cannot be made is tried again only
        before it, with short backoff (``Call.reconnect_until``); None: as any failure, within the deadline."""
        path = at(paths.STOP_SESSION, session_id=session_id)
        call = Call("POST", path, reconnect_until=reconnect_until)
        return self._one(self._send(call), wire.Session, session_id)

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
        accumulates = wire.accumulates(kind, data)
        if kind in wire.OFFLOADED_KINDS and len(content) > wire.LARGE_PAYLOAD_BYTES:
            upload, inline = payloads.split(kind, data)
            return PreparedOperation(kind, payloads.compact(inline), key, payloads.compact(upload), inline, accumulates)
        return PreparedOperation(kind, content, key, accumulates=accumulates)

    def send_operation(
        self, session_id: str, op: PreparedOperation, earlier: Container[str] = ()
    ) -> wire.Operation[Any]:
        """Send a prepared operation (its upload first, if any); its envelope. A 2xx whose envelope cannot be read (a
        proxy's truncated or garbled answer, one without an id), or names one of the ``earlier`` operations (a stale
        answer a proxy sent twice), is asked again with the same ``Idempotency-Key``, which the API answers with the
        operation it took, up to ``max_retries`` times: failed at once, the operation would run on the server while its
        record says FAILED (an optim-step applied and never recorded). Still an earlier one's, it is returned."""
        content = op.content
        if op.upload is not None and op.inline is not None:
            try:
                content = payloads.compact({**op.inline, "payload_id": self.upload_payload(session_id, op.upload)})
            except APIError as exc:  # its POST follows the upload: the server has not seen the operation
                exc.sent, exc.earlier_may_have_acted = False, False  # the upload's retries acted on the upload alone
                raise
        call = Call("POST", _operations_path(session_id, op.kind), content, idempotency_key=op.idempotency_key)
        for again in range(self.max_retries + 1):
            try:
                response = self._send(call)
            except APIError as exc:  # a try before got a 2xx: the server took it, whatever this one's error says
                exc.earlier_may_have_acted |= again > 0
                raise
            try:
                env = self._operation(session_id, op.kind, response, None)
            except APIError as exc:
                unread = exc
                log.info("%s; asking again with its Idempotency-Key (%d of %d)", exc, again + 1, self.max_retries)
                continue
            if env.id not in earlier or again == self.max_retries:
                return env
            log.info("%s %s: the answer names an earlier operation, %s; asking again with its Idempotency-Key (%d of "
                     "%d)", call.method, call.url, env.id, again + 1, self.max_retries)  # fmt: skip
        said = str(unread).removeprefix(f"{unread.method} {unread.url}: ")
        tries = (
            f"also when asked {self.max_retries} more times" if self.max_retries else "and max_retries=0 asks no more"
        )
        raise APIError(
            f"{said}; the server took the POST ({response.status_code}) and may run this {op.kind}: its answer could "
            f"not be read, {tries} with the same Idempotency-Key",
            method=unread.method,
            url=unread.url,
        )

    def get_operation(
        self,
        session_id: str,
        kind: wire.OperationKind,
        operation_id: str,
        *,
        wait: float | None = None,
        seen: str | None = None,
        until: float | None = None,
    ) -> wire.Operation[Any]:
        """GET one operation. ``wait``/``seen`` use rlnb serve's long-poll (see ``features``): the answer
        comes when the status differs from ``seen``, the operation ends, or ``wait`` seconds pass. ``until``
        (``time.monotonic()``) ends the call, retries included, if that is sooner than its deadline."""
        path = _operations_path(session_id, kind, operation_id)
        params = {"wait": f"{wait:g}", **({"seen": seen} if seen else {})} if wait else None
        call = Call("GET", path, params=params, wait=wait or 0.0, until=until)
        try:
            return self._operation(session_id, kind, self._send(call), operation_id)
        except PayloadGone:  # rlnb serve answers a stopped session's results whole: asked again, it may need none
            return self._operation(session_id, kind, self._send(Call("GET", path, until=until)), operation_id)

    # -- request / response ----------------------------------------------------------------------

    def _operation(
        self, session_id: str, kind: wire.OperationKind, response: httpx.Response, operation_id: str | None
    ) -> wire.Operation[Any]:
        """The typed envelope; an output naming a ``payload_id`` gets the offloaded members merged in
        (downloaded keys win, as in the SDK). Its id must be the one asked for (``operation_id``), or any
        but empty for a submission: the poller polls by it, and an empty one addresses no operation. A
        COMPLETED one carries its output, unless its kind may go without (``wire.OUTPUT_OPTIONAL``). A submission's
        whose offloaded result cannot be fetched yet is RUNNING without it, for the poller to fetch."""
        model = wire.ENVELOPES[kind]
        data = self._bodies.decode(response, model.__name__)
        output = data.get("output") if isinstance(data, dict) else None
        if isinstance(output, dict) and output.get("payload_id"):
            inline = {k: v for k, v in output.items() if k != "payload_id"}
            try:
                data["output"] = {**inline, **self.result_payload(session_id, kind, data, str(output["payload_id"]))}
            except (PayloadGone, APIConnectionError) as exc:
                if operation_id is not None:
                    raise
                # a submission the server took: the poller fetches its result (asking again on PayloadGone); the
                # POST sent again would only repeat the download, then fail the operation as unread
                log.info("%s; polling it for its result", exc)
                data.update(status=wire.OperationStatus.RUNNING.value, output=None)
        env = self._bodies.validate(response, data, model)
        if not env.id or (operation_id is not None and env.id != operation_id):
            asked = f"operation {operation_id!r}" if operation_id is not None else "a new operation"
            raise invalid(response, model.__name__, f"its id is {env.id!r}, for {asked}")
        if env.status == wire.OperationStatus.COMPLETED and env.output is None and kind not in wire.OUTPUT_OPTIONAL:
            raise invalid(response, model.__name__, f"{kind} {env.id} is COMPLETED without the output the API requires")
        return env
