"""``APIClient``'s checkpoints half: the checkpoints collection (list, get), a checkpoint's presigned download URLs,
and ``download_checkpoint``, which fetches its files into a folder (``downloads`` says where each goes).

Every call here is a GET, retried as any: a file is fetched again from its first byte. The files come from the
presigned URLs the API hands out, checked as the payloads' are (absolute, never http under an https ``base_url``),
without the API key, each within the download's one deadline.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO, get_args

import httpx

from rlnb import wire
from rlnb._input.checks import check_seconds
from rlnb.remote import bodies, downloads, payloads, transport
from rlnb.remote.call_spec import Call
from rlnb.remote.endpoints import Endpoints, at, list_params
from rlnb.wire import paths

VARIANTS: tuple[str, ...] = get_args(wire.CheckpointVariant)
TYPES: tuple[str, ...] = get_args(wire.CheckpointType)
MERGED = wire.CHECKPOINT_MERGED
DOWNLOAD_DEADLINE = 3600.0
"""Seconds ``download_checkpoint`` may take in all by default (a merged model is gigabytes)."""


def _variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    return variant


class CheckpointCalls(Endpoints):
    """The checkpoints endpoints (see ``APIClient`` for the client's arguments)."""

    def list_checkpoints(
        self,
        *,
        session_id: str | None = None,
        base_model: str | None = None,
        type: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> wire.CheckpointList:
        """One page of checkpoints, newest first; ``type`` one of ``wire.CheckpointType`` (None: both), ``limit``
        1..100; pass ``meta.next_cursor`` as ``after`` while ``meta.has_more``."""
        if type is not None and type not in TYPES:
            raise ValueError(f"type must be None or one of {', '.join(TYPES)}; got {type!r}")
        params = list_params(limit, session_id=session_id, base_model=base_model, type=type, after=after)
        return self._parse(self._send(Call("GET", paths.CHECKPOINTS, params=params)), wire.CheckpointList)

    def get_checkpoint(self, checkpoint_id: str) -> wire.Checkpoint:
        """A checkpoint of any session, stopped ones too: it outlives its session and resource."""
        path = at(paths.CHECKPOINT, checkpoint_id=checkpoint_id)
        return self._one(self._send(Call("GET", path)), wire.Checkpoint, checkpoint_id)

    def checkpoint_download_urls(self, checkpoint_id: str, variant: str = MERGED) -> wire.CheckpointDownload:
        """The files of an inference checkpoint's ``variant`` (MERGED: the full model with the trained weights
        applied; ADAPTER: the LoRA weights only), each with its presigned URL and size."""
        return self._download_urls(checkpoint_id, variant, None)

    def _download_urls(self, checkpoint_id: str, variant: str, until: float | None) -> wire.CheckpointDownload:
        path = at(paths.CHECKPOINT_DOWNLOAD, checkpoint_id=checkpoint_id)
        call = Call("GET", path, params={"variant": _variant(variant)}, until=until)
        return self._parse(self._send(call), wire.CheckpointDownload)

    def download_checkpoint(
        self, checkpoint_id: str, folder: str | Path, *, variant: str = MERGED, deadline: float = DOWNLOAD_DEADLINE
    ) -> list[Path]:
        """Fetch an inference checkpoint's files into ``folder`` (made if missing; a file of the same name is
        replaced); the paths written, in the API's order. All of it (the URLs and every file) ends within
        ``deadline`` seconds. Each file must be the size the API lists; a name that would lead outside ``folder``
        is refused before anything is fetched; nothing partial is left behind (``downloads``)."""
        _variant(variant)
        deadline = check_seconds("deadline", deadline, positive=True)
        path = downloads.check_folder(folder)
        end = time.monotonic() + deadline
        files = self._download_urls(checkpoint_id, variant, end).data
        urls = [payloads.presigned(f.url, self.base_url, f"url of file {f.filename!r}") for f in files]
        places = downloads.targets(checkpoint_id, files, path)
        with downloads.partials(places) as partials:
            for f, url, partial in zip(files, urls, partials, strict=True):
                with open(partial, "r+b") as out:
                    self._fetch_file(checkpoint_id, f, url, out, end)
                    out.flush()
                    os.fsync(out.fileno())
        return places

    def _fetch_file(self, checkpoint_id: str, item: wire.CheckpointFile, url: str, out: IO[bytes], end: float) -> None:
        """One file into ``out``, streamed, with the retry policy, by ``end``; no API key goes with it."""
        call = Call("GET", url, auth=False)
        request = self._build(call)
        request.headers["Accept"], request.headers["Accept-Encoding"] = "*/*", "identity"
        limit = "the download's deadline"
        attempt = 0
        while True:
            answered: httpx.Response | None = None
            failure: httpx.RequestError | None = None
            try:
                with transport.deadline(end):
                    response = self._open(request, trusted=False)
                    try:
                        if response.is_success:
                            downloads.copy(response, out, checkpoint_id, item, end)
                            return
                        bodies.read(response, self.max_response_bytes)  # an error's body, for its message
                        answered = response
                    finally:
                        response.close()
            except httpx.RequestError as exc:
                failure = exc  # a stream cut short too: fetched again from its first byte
            self._after_failure(request, attempt, answered, failure, end, limit, call)
            attempt += 1
