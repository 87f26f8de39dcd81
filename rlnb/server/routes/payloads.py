"""The payload side channel (SDK 3.1.1): presigned upload and download URLs, and the URLs themselves.

An upload URL only uploads and a download URL only downloads; both expire after ``payload_ttl``
seconds. An upload's bytes are counted against the payload caps as they arrive (``payloads``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from rlnb import wire
from rlnb.server.deps import AUTHENTICATED, OVERRIDES, NoBody, RegistryDep
from rlnb.server.errors import ERROR_RESPONSES
from rlnb.wire import paths

router = APIRouter(prefix=paths.API_PREFIX, tags=["payloads"], **AUTHENTICATED)
presigned = APIRouter(
    prefix=f"{paths.API_PREFIX}/payloads",
    tags=["payloads"],
    responses=ERROR_RESPONSES,
    dependency_overrides_provider=OVERRIDES,
)
"""Presigned: no Authorization header (the SDK sends none), a signature and an expiry in the query."""


@router.post(paths.PAYLOAD_UPLOAD_URL)
def payload_upload_url(session_id: str, registry: RegistryDep, body: NoBody = None) -> wire.PayloadUploadUrl:
    """A payload id and a URL to PUT the whole JSON body to; then submit the operation with ``payload_id``.
    Only an active session takes uploads (409 otherwise)."""
    p = registry.payloads.new_upload(registry.session(session_id))
    url = registry.signer.payload(p.id, "upload", registry.settings.payload_ttl)
    return wire.PayloadUploadUrl(payload_id=p.id, upload_url=url)


@router.post(paths.PAYLOAD_DOWNLOAD_URL)
def payload_download_url(
    session_id: str, payload_id: str, registry: RegistryDep, body: NoBody = None
) -> wire.PayloadDownloadUrl:
    """A URL to GET a payload (an offloaded result, or an upload not used yet) from."""
    registry.session(session_id)
    p = registry.payloads.owned(session_id, payload_id)
    url = registry.signer.payload(p.id, "download", registry.settings.payload_ttl)
    return wire.PayloadDownloadUrl(download_url=url)


JSON_OBJECT = {"content": {"application/json": {"schema": {"type": "object"}}}}


@presigned.put(
    "/{payload_id}",
    name="put_payload",
    openapi_extra={"requestBody": {"required": True, **JSON_OBJECT}},
    responses={200: {"description": "Stored", "content": {}}},
)
async def put_payload(
    payload_id: str, request: Request, registry: RegistryDep, sig: str = "", expires: str = ""
) -> Response:
    """Store the body (compact JSON, up to ``max_payload_bytes``: ``body_limit.BodyLimit``), counting each
    chunk against the caps before it is kept."""
    registry.signer.check_payload(payload_id, "upload", expires, sig)  # refuse a forged URL before reading
    length = request.headers.get("content-length", "")
    store = registry.payloads
    p = store.begin_upload(payload_id, int(length) if length.isdigit() else None)
    data = bytearray()
    try:
        async for chunk in request.stream():
            store.reserve(p, len(chunk))
            data += chunk
    except BaseException:
        store.abort_upload(p, len(data))
        raise
    store.finish_upload(p, data)
    return Response(status_code=200)


@presigned.get("/{payload_id}", name="get_payload", responses={200: {"description": "The JSON object", **JSON_OBJECT}})
def get_payload(payload_id: str, registry: RegistryDep, sig: str = "", expires: str = "") -> Response:
    registry.signer.check_payload(payload_id, "download", expires, sig)
    return Response(bytes(registry.payloads.get(payload_id)), media_type="application/json")
