"""A checkpoint file swapped for a named pipe after the server's checks, as its presigned download is served: the
route opens the file itself (``locks.regular``) and serves that descriptor. Starlette's ``FileResponse`` opened it
again by name once the headers were sent: a pipe put there between waited for ever, holding a worker thread and
the response. Each request runs with a deadline (``result_in_time``), so a wait fails the test."""

import logging
import os

import pytest
from starlette.responses import FileResponse

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


def test_a_file_swapped_for_a_pipe_as_the_response_begins_is_served_as_it_was_opened(tmp_path, monkeypatch):
    with app_client(tmp_path) as c:
        path, saved, url = saved_config(c, tmp_path)
        real = FileResponse.set_stat_headers

        def headers_then_swapped(self, stat_result):  # starlette's own look, just before its open
            real(self, stat_result)
            swap(path)

        monkeypatch.setattr(FileResponse, "set_stat_headers", headers_then_swapped)
        r = result_in_time(lambda: c.get(url), path)
    assert r.status_code == 200 and r.content == saved
