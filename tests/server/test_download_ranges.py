"""A presigned checkpoint file is served with the headers Starlette's ``FileResponse`` sent, and one byte range of it
when asked (``curl -C -``, ``wget -c`` resume a cut download so): a 206 of that span, a 416 past the end; several
ranges, a unit or form not read, or an If-Range naming another version get the whole file (RFC 9110 lets a server
ignore a Range header)."""

import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from starlette.responses import FileResponse

from rlnb.server.opened_file import Unsatisfiable, byte_span
from tests.support.server import app_client, new_session, submit, wait

MERGED = {"variant": "CHECKPOINT_VARIANT_MERGED"}
OCTETS = "application/octet-stream"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[TestClient, str, bytes, FileResponse]]:
    """The client, the presigned URL of a checkpoint's ``config.json``, its bytes, and the ``FileResponse`` of it."""
    tmp = tmp_path_factory.mktemp("ranges")
    with app_client(tmp) as c:
        _, sid = new_session(c)
        cid = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])["output"][
            "checkpoint"
        ]["id"]
        files = c.get(f"/checkpoints/{cid}/download", params=MERGED).json()["data"]
        url = next(f["url"] for f in files if f["filename"] == "config.json")
        path = tmp / cid / "merged" / "config.json"
        expected = FileResponse(path, filename="config.json", media_type=OCTETS, stat_result=os.stat(path))
        yield c, url, path.read_bytes(), expected


def test_a_whole_file_has_the_headers_starlettes_file_response_sent(served):
    c, url, saved, expected = served
    r = c.get(url)
    assert r.status_code == 200 and r.content == saved
    for name in ("content-length", "content-disposition", "last-modified", "etag", "accept-ranges", "content-type"):
        assert r.headers[name] == expected.headers[name], name
    assert r.headers["content-type"] == OCTETS


@pytest.mark.parametrize(
    ("asked", "span"),
    [("bytes=0-9", (0, 10)), ("bytes=5-", (5, None)), ("bytes=-7", (-7, None)), (f"bytes=3-{10**9}", (3, None))],
)
def test_one_byte_range_is_a_206_of_that_span(served, asked, span):
    c, url, saved, _ = served
    r = c.get(url, headers={"Range": asked})
    part = saved[span[0] : span[1]]
    first = span[0] % len(saved)
    assert r.status_code == 206 and r.content == part, r.headers
    assert r.headers["content-range"] == f"bytes {first}-{first + len(part) - 1}/{len(saved)}"
    assert r.headers["content-length"] == str(len(part))


@pytest.mark.parametrize("asked", ["bytes=999999-", "bytes=-0", f"bytes={'9' * 5000}-"])
def test_a_range_past_the_end_is_a_416_saying_the_size(served, asked):
    c, url, saved, _ = served
    r = c.get(url, headers={"Range": asked})
    assert r.status_code == 416 and r.content == b""
    assert r.headers["content-range"] == f"bytes */{len(saved)}"


@pytest.mark.parametrize("asked", ["bytes=0-1,4-5", "items=0-1", "bytes=5-3", "bytes", "bytes=x-y", "bytes=-"])
def test_any_other_range_gets_the_whole_file(served, asked):
    c, url, saved, _ = served
    r = c.get(url, headers={"Range": asked})
    assert r.status_code == 200 and r.content == saved


def test_if_range_serves_the_range_only_of_the_version_it_names(served):
    c, url, saved, expected = served
    for validator in (expected.headers["etag"], expected.headers["last-modified"]):
        r = c.get(url, headers={"Range": "bytes=0-1", "If-Range": validator})
        assert r.status_code == 206 and r.content == saved[:2]
    r = c.get(url, headers={"Range": "bytes=0-1", "If-Range": '"another"'})
    assert r.status_code == 200 and r.content == saved


def test_byte_span_reads_the_forms_rfc_9110_gives():
    assert byte_span(None, 10) is None
    assert byte_span("bytes=2-4", 10) == (2, 5)
    assert byte_span("BYTES = 2 - ", 10) == (2, 10)
    assert byte_span("bytes=-20", 10) is None  # more than the file: the whole of it
    assert byte_span("bytes=٣-4", 10) is None  # an Arabic-Indic digit is not a number here
    with pytest.raises(Unsatisfiable):
        byte_span("bytes=0-", 0)
