"""``/v1/rl/training-sessions/{session_id}/operations/<kind>``: one POST (submit) and one GET (poll) per kind.

The GET takes rlnb's long-poll extension: ``?wait=S`` holds the answer until the operation's status differs
from ``seen`` (default: its status when the request arrived) or it ends, for at most ``S`` seconds. A body
with ``payload_id`` is replaced by its upload (the payload side channel) before it is validated and run.

Before anything is queued: a field the schema does not have is a 400 naming it, the limits of
``ServerSettings`` are checked (``limits``), and an ``Idempotency-Key`` is bound to its body: the same key
with the same body returns the original operation, with another body a 409; an empty key is a 400.
"""

import json
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Body, Header, Query
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from rlnb import wire
from rlnb.server.counts import check_counts
from rlnb.server.deps import AUTHENTICATED, BodyBytes, NoBody, RegistryDep
from rlnb.server.errors import SHOWN, ServerError
from rlnb.server.limits import check_context, check_known, check_operation, fingerprint
from rlnb.server.records import OpRecord, json_body
from rlnb.server.registry import Registry
from rlnb.server.settings import MAX_WAIT
from rlnb.wire import paths

router = APIRouter(prefix=paths.API_PREFIX, tags=["operations"], **AUTHENTICATED)

Key = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        description="Required; a retry with the same key and body returns the original operation.",
    ),
]
Wait = Annotated[
    float | None,
    Query(
        ge=0,
        le=MAX_WAIT,
        allow_inf_nan=False,  # NaN refused as not finite, not as "less than or equal to 30"
        description="rlnb extension: hold the answer up to this many seconds until the status changes",
    ),
]
Seen = Annotated[
    wire.OperationStatus | None,
    Query(description="rlnb extension, with `wait`: the status the client already knows (default: the current one)"),
]


def with_payload(registry: Registry, session_id: str, request_type: type[wire._Model], body: Any) -> Any:
    """The body to run: the inline one with the uploaded object's members over it (as the SDK merges)."""
    uploaded = registry.payloads.body(session_id, body.payload_id)
    check_counts(registry.settings, request_type, uploaded, "payload.")  # before its validation, as an inline body
    merged = {**body.model_dump(mode="json", exclude_unset=True, by_alias=True), **uploaded}
    merged.pop("payload_id", None)
    try:
        return request_type.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(["payload", *map(str, first["loc"])])
        raise ServerError(400, f"{param}: {first['msg']}", param=param) from None


def splits(registry: Registry, op: OpRecord) -> bool:
    """Whether serving ``op`` may split its result now (``served``): a completed result of a kind with large members,
    not split yet, where ``result_offload_bytes`` is set. Read without the lock: ``served`` checks again under it."""
    if registry.settings.result_offload_bytes is None or op.kind not in wire.OFFLOADED_RESULT_MEMBERS:
        return False
    return op.offloaded is None and op.env.status == wire.OperationStatus.COMPLETED


def split(body: bytes, members: tuple[str, ...], limit: int) -> tuple[dict[str, Any], bytes] | None:
    """``body`` (an envelope's JSON) without its output's large ``members``, and those members' JSON; None when the
    output is within ``limit``. Seconds for a large result (an 8.9 MB sample result took 0.74-1.4 s): made outside the
    registry's lock, in a worker thread (``get``), so no other request waits on it."""
    data = json.loads(body)
    out = data["output"]
    if len(json.dumps(out, separators=(",", ":"))) <= limit:
        return None
    return data, json.dumps({k: out.pop(k) for k in members if k in out}).encode()


def served(registry: Registry, session_id: str, op: OpRecord) -> Response:
    """The envelope as JSON (``OpRecord.reply``); a completed output over ``result_offload_bytes`` keeps its small
    members and names a payload holding the rest (made once per operation, while the session is active: its
    payloads go when it ends, and its results are then served whole). The lock is held only to read and to keep:
    two GETs splitting one result at once keep the first's payload and serve it both."""
    limit = registry.settings.result_offload_bytes
    members = wire.OFFLOADED_RESULT_MEMBERS.get(op.kind)
    if limit is None or op.env.status != wire.OperationStatus.COMPLETED or members is None:
        return answer(op.reply())
    with registry.lock:
        if not _split_now(registry, session_id, op):
            return answer(op.reply() if op.offloaded is None else op.offloaded)
    whole = op.reply()
    parts = split(whole, members, limit)
    with registry.lock:
        if not _split_now(registry, session_id, op):  # ended, let go or split by another GET meanwhile
            return answer(op.reply() if op.offloaded is None else op.offloaded)
        if parts is None:
            registry.sessions[session_id].offload(op, whole, None)
            return answer(whole)
        data, big = parts
        data["output"]["payload_id"] = registry.payloads.new_result(session_id, big).id
        body = json_body(data)  # the small members only
        registry.sessions[session_id].offload(op, body, (data["output"]["payload_id"], len(big)))
        return answer(body)


def _split_now(registry: Registry, session_id: str, op: OpRecord) -> bool:
    """Under the lock: ``op`` is still its active session's, and not split yet."""
    s = registry.sessions[session_id]
    return s.status in wire.SESSION_ACTIVE and s.ops.get(op.env.id) is op and op.offloaded is None


def answer(body: bytes) -> Response:
    """An envelope's bytes as a ``JSONResponse`` of it sends them."""
    return Response(body, media_type=JSONResponse.media_type)


def _add_routes(kind: wire.OperationKind, request_type: type[wire._Model] | None) -> None:
    name = kind.replace("-", "_")

    def retry_or_submit(registry: Registry, session_id: str, key: str, body: Any, size: int) -> Response:
        """``size``: the bytes of the body as sent; an upload's are added (``max_pending_bytes``)."""
        signed = fingerprint(body)  # of the body as sent: a retry of a payload body sends the same payload_id
        known = registry.replay(session_id, kind, key, signed)  # a retry: before its payload is read again
        if known is None:
            payload_id = getattr(body, "payload_id", None)
            if body is not None and payload_id:
                assert request_type is not None
                size += registry.payloads.size(session_id, payload_id)
                body = with_payload(registry, session_id, request_type, body)
            if body is not None:
                check_known(body)
                check_operation(registry.settings, kind, body)
                context = registry.context_length(session_id)
                if context is not None:  # else ``submit`` answers: the session is being built, or ended
                    check_context(context, body)
            known = registry.submit(session_id, kind, key, body, signed, payload_id, size)
        return answer(known.reply())

    if request_type is None:

        def submit(
            session_id: str,
            idempotency_key: Key,
            registry: RegistryDep,
            size: BodyBytes,
            body: NoBody = None,
        ) -> Any:
            return retry_or_submit(registry, session_id, idempotency_key, None, size)  # a body has no field to keep

    else:

        def submit(  # type: ignore[misc]  # one of two signatures, picked per kind (FastAPI reads it)
            session_id: str,
            idempotency_key: Key,
            registry: RegistryDep,
            size: BodyBytes,
            body: Annotated[request_type, Body()],  # type: ignore[valid-type]  # the kind's body model, a runtime value
        ) -> Any:
            return retry_or_submit(registry, session_id, idempotency_key, body, size)

    async def get(
        session_id: str, operation_id: str, registry: RegistryDep, wait: Wait = None, seen: Seen = None
    ) -> Any:
        op = registry.operation(session_id, kind, operation_id)
        if seen is not None and wait is None:  # it would be ignored: the caller expects to be held
            raise ServerError(400, "seen applies only with wait (seconds to hold the answer)", param="seen")
        if wait:
            await registry.wait_for_change(op, seen, wait)
        if splits(registry, op):  # seconds for a large result: the event loop serves other requests meanwhile
            return await anyio.to_thread.run_sync(served, registry, session_id, op)
        return served(registry, session_id, op)

    envelope = wire.ENVELOPES[kind]
    submits, gets = paths.OPERATIONS.replace("{kind}", kind), paths.OPERATION.replace("{kind}", kind)
    router.add_api_route(submits, submit, methods=["POST"], response_model=envelope, name=f"submit_{name}")
    router.add_api_route(gets, get, methods=["GET"], response_model=envelope, name=f"get_{name}")


for _kind, _request_type in wire.REQUEST_TYPES.items():
    _add_routes(_kind, _request_type)


def _unknown_kind(kind: str) -> None:
    """A kind this API does not have (``operations/bogus``, a typo) was FastAPI's route miss, 404 "Not Found" naming
    nothing; now it names the kind and the kinds there are. After every kind's routes: only a miss gets here."""
    kinds = ", ".join(wire.OperationKind)
    raise ServerError(404, f"unknown operation kind {wire.shown(kind, SHOWN)}: the kinds are {kinds}", param="kind")


router.add_api_route(paths.OPERATIONS, _unknown_kind, methods=["POST"], include_in_schema=False)
router.add_api_route(paths.OPERATION, _unknown_kind, methods=["GET"], include_in_schema=False)
