"""``/v1/rl/checkpoints``: list, get, download (presigned URLs, one per file of the variant asked for,
signed for that file and valid ``download_ttl`` seconds: ``links``)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse

from rlnb import _files, wire
from rlnb.server.deps import AUTHENTICATED, OVERRIDES, RegistryDep
from rlnb.server.errors import ERROR_RESPONSES, SHOWN, ServerError
from rlnb.server.opened_file import OpenedFileResponse
from rlnb.server.ops import FileKind
from rlnb.server.settings import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT
from rlnb.wire import paths

log = logging.getLogger("rlnb")
router = APIRouter(prefix=paths.API_PREFIX, tags=["checkpoints"], **AUTHENTICATED)
presigned = APIRouter(
    prefix=f"{paths.API_PREFIX}{paths.CHECKPOINTS}",
    tags=["checkpoints"],
    responses=ERROR_RESPONSES,
    dependency_overrides_provider=OVERRIDES,
)
"""Files behind presigned URLs: no Authorization header (the SDK strips it), a per-checkpoint signature."""


@router.get(paths.CHECKPOINTS)
def list_checkpoints(
    registry: RegistryDep,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    base_model: str | None = None,
    session_id: str | None = None,
    type: wire.CheckpointType | None = None,
) -> wire.CheckpointList:
    return registry.list_checkpoints(after, limit, base_model, session_id, type)


@router.get(paths.CHECKPOINT)
def get_checkpoint(checkpoint_id: str, registry: RegistryDep) -> wire.Checkpoint:
    return registry.checkpoint(checkpoint_id).info


@router.get(paths.CHECKPOINT_DOWNLOAD)
def download_checkpoint(
    checkpoint_id: str, registry: RegistryDep, variant: wire.CheckpointVariant
) -> wire.CheckpointDownload:
    """MERGED (or UNSPECIFIED): the full model with the trained weights applied; ADAPTER: the LoRA weights
    only. One presigned URL per file, on the server's configured address, valid ``download_ttl`` seconds."""
    kind: FileKind = "adapter" if variant == wire.CHECKPOINT_ADAPTER else "merged"
    ttl = registry.settings.download_ttl
    data = [
        wire.CheckpointFile(
            filename=f.name,
            url=registry.signer.checkpoint_file(checkpoint_id, kind, f.name, ttl),
            size=f.stat().st_size,
        )
        for f in registry.checkpoint_files(checkpoint_id, kind)
    ]
    return wire.CheckpointDownload(data=data)


@presigned.get(
    "/{checkpoint_id}/files/{kind}/{filename}",
    name="checkpoint_file",
    response_class=FileResponse,
    responses={
        200: {
            "description": "The file",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
def checkpoint_file(
    checkpoint_id: str,
    kind: FileKind,
    filename: str,
    registry: RegistryDep,
    request: Request,
    sig: str = "",
    expires: str = "",
) -> OpenedFileResponse:
    registry.signer.check_checkpoint_file(checkpoint_id, kind, filename, expires, sig)
    files = {f.name: f for f in registry.checkpoint_files(checkpoint_id, kind)}
    if filename not in files:
        said = f"checkpoint {checkpoint_id} has no file {wire.shown(filename, SHOWN)}"
        raise ServerError(404, said, param="filename")
    try:
        fh = open(files[filename], "rb", opener=_files.regular)  # noqa: SIM115 - the response closes it
    except OSError as exc:
        if exc.errno is not None:  # gone, unreadable: the app's 500, as before
            raise
        log.warning("rlnb serve: checkpoint %s is not served: %s", checkpoint_id, exc)  # the operator's to mend
        said = f"checkpoint {checkpoint_id}'s file {kind}/{filename} is not a regular file (not a file rlnb saved): "
        raise ServerError(409, said + "its download is refused", param="checkpoint_id") from None
    return OpenedFileResponse(fh, filename, request.headers)
