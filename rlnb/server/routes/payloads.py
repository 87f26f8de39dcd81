"""The payload side channel (SDK 3.1.1): presigned upload and download URLs, and the URLs themselves."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from rlnb import wire
from rlnb.server.deps import AUTHENTICATED, RegistryDep
from rlnb.server.errors import ERROR_RESPONSES
from rlnb.server.links import PAYLOADS

router = APIRouter(prefix="/v1/rl/training-sessions/{session_id}/payloads", tags=["payloads"], **AUTHENTICATED)
presigned = APIRouter(prefix="/v1/rl/payloads", tags=["payloads"], responses=ERROR_RESPONSES)
"""Presigned: no Authorization header (the SDK sends none), a per-payload signature in the query."""


@router.post("/upload-url")
def payload_upload_url(session_id: str, registry: RegistryDep) -> wire.PayloadUploadUrl:
    """A payload id and a URL to PUT the whole JSON body to; then submit the operation with ``payload_id``."""
    registry.session(session_id)
    p = registry.payloads.new(session_id)
    return wire.PayloadUploadUrl(
        payload_id=p.id, upload_url=registry.signer.url(PAYLOADS.format(pid=p.id), sig=p.secret)
    )


@router.post("/{payload_id}/download-url")
def payload_download_url(session_id: str, payload_id: str, registry: RegistryDep) -> wire.PayloadDownloadUrl:
    """A URL to GET a payload (an offloaded result, or an upload) from."""
    registry.session(session_id)
    p = registry.payloads.owned(session_id, payload_id)
    return wire.PayloadDownloadUrl(download_url=registry.signer.url(PAYLOADS.format(pid=p.id), sig=p.secret))


JSON_OBJECT = {"content": {"application/json": {"schema": {"type": "object"}}}}


@presigned.put(
    "/{payload_id}",
    name="put_payload",
    openapi_extra={"requestBody": {"required": True, **JSON_OBJECT}},
    responses={200: {"description": "Stored", "content": {}}},
)
async def put_payload(payload_id: str, request: Request, registry: RegistryDep, sig: str = "") -> Response:
    """Store the body (compact JSON, up to ``ServerSettings.max_payload_bytes``: ``limits.BodyLimit``)."""
    registry.payloads.signed(payload_id, sig)  # refuse a forged URL before reading the body
    registry.payloads.put(payload_id, sig, await request.body())
    return Response(status_code=200)


@presigned.get("/{payload_id}", name="get_payload", responses={200: {"description": "The JSON object", **JSON_OBJECT}})
def get_payload(payload_id: str, registry: RegistryDep, sig: str = "") -> Response:
    return Response(registry.payloads.get(payload_id, sig), media_type="application/json")
