"""A checkpoint file swapped for a named pipe after the server's checks, as its presigned download is served: the
route opens the file itself (``_files.regular``) and serves that descriptor. Starlette's ``FileResponse`` opened it
again by name once the headers were sent: a pipe put there between waited for ever, holding a worker thread and
the response. Each request runs with a deadline (``result_in_time``), so a wait fails the test."""

import logging
import os

import anyio
import pytest
from fastapi.testclient import TestClient
from starlette.responses import FileResponse

from rlnb import _files
from rlnb.server import ops
from tests.support.pipes import result_in_time
from tests.support.server import app_client, new_session, submit, wait

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")

MERGED = {"variant": "CHECKPOINT_VARIANT_MERGED"}


def saved_config(c, tmp_path):
    """An inference checkpoint's ``config.json``: its path, its bytes and its presigned URL."""
    _, sid = new_session(c)
    done = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
    cid = done["output"]["checkpoint"]["id"]
    url = next(f["url"] for f in c.get(f"/checkpoints/{cid}/download", params=MERGED).json()["data"]
               if f["filename"] == "config.json")  # fmt: skip
    path = tmp_path / cid / "merged" / "config.json"
    return path, path.read_bytes(), url


def swap(path):
    path.unlink()
    os.mkfifo(path)


def test_a_file_swapped_for_a_pipe_after_the_checks_is_refused_with_a_409_naming_it(tmp_path, monkeypatch, caplog):
    with app_client(tmp_path) as c:
        path, _, url = saved_config(c, tmp_path)
        real = ops.served_files

        def checked_then_swapped(*args):
            files = real(*args)
            swap(path)
            return files

        monkeypatch.setattr(ops, "served_files", checked_then_swapped)
        with caplog.at_level(logging.WARNING, "rlnb"):
            r = result_in_time(lambda: c.get(url), path)
    said = r.json()["error"]["message"]
    assert r.status_code == 409 and "file merged/config.json is not a regular file" in said, r.text
    assert str(tmp_path) not in said  # the server's paths are the operator's
    assert any("config.json" in m.getMessage() for m in caplog.records if m.levelno == logging.WARNING)


def swapped_once_opened(monkeypatch, path):
    """The route's open of ``path`` swaps it for a pipe just after: any later open by name waits on the pipe."""
    real = _files.regular

    def opened_then_swapped(name, flags, *args):
        fd = real(name, flags, *args)
        if name == str(path):
            swap(path)
        return fd

    monkeypatch.setattr(_files, "regular", opened_then_swapped)


def test_a_file_swapped_for_a_pipe_as_the_response_begins_is_served_as_it_was_opened(tmp_path, monkeypatch):
    with app_client(tmp_path) as c:
        path, saved, url = saved_config(c, tmp_path)
        swapped_once_opened(monkeypatch, path)
        r = result_in_time(lambda: c.get(url), path)
    assert r.status_code == 200 and r.content == saved


async def _simple_by_name(self, send, send_header_only, send_pathsend):
    """``FileResponse._handle_simple`` of a Starlette without the ``_open_file`` hook: it opens the file by name."""
    await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
    async with await anyio.open_file(self.path, "rb") as file:
        await send({"type": "http.response.body", "body": await file.read(), "more_body": False})


def test_the_opened_file_is_served_on_a_starlette_without_the_open_file_hook(tmp_path, monkeypatch):
    monkeypatch.delattr(FileResponse, "_open_file")
    monkeypatch.setattr(FileResponse, "_handle_simple", _simple_by_name)
    with app_client(tmp_path) as c:
        path, saved, url = saved_config(c, tmp_path)
        swapped_once_opened(monkeypatch, path)
        r = result_in_time(lambda: c.get(url), path)
    assert r.status_code == 200 and r.content == saved


def test_an_asgi_server_offering_pathsend_is_sent_the_bytes_not_the_path(tmp_path, monkeypatch):
    """A server offering ``http.response.pathsend`` (Granian; nginx-unit-like) opens a path it is sent by name:
    the pipe put there would be waited on. The opened file's bytes are sent instead."""
    kinds = []

    def offering_pathsend(app):
        async def wrapped(scope, receive, send):
            if scope["type"] == "http":
                scope = {**scope, "extensions": {**scope.get("extensions", {}), "http.response.pathsend": {}}}

            async def seen(message):
                kinds.append(message["type"])
                if message["type"] == "http.response.pathsend":  # the test client would wait for a body
                    message = {"type": "http.response.body", "body": b"", "more_body": False}
                await send(message)

            await app(scope, receive, seen)

        return wrapped

    with app_client(tmp_path) as c:
        path, saved, url = saved_config(c, tmp_path)
        swapped_once_opened(monkeypatch, path)
        kinds.clear()
        offered = TestClient(offering_pathsend(c.app), base_url=str(c.base_url))
        r = result_in_time(lambda: offered.get(url), path)
    assert "http.response.pathsend" not in kinds
    assert r.status_code == 200 and r.content == saved
