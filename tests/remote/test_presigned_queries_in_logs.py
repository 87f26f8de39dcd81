"""A presigned URL's query signs it: whoever reads it may fetch or replace the data until it expires. httpx's INFO line
("HTTP Request: PUT https://storage.test/p1?sig=... 200 OK") printed it whole for each upload, download and checkpoint
file, to the root logger's handlers (``logging.basicConfig(level=INFO)``) and through ``rlnb.configure_logging``
alike. The queries of presigned requests are masked in every line httpx, httpcore and HTTP/2 log; the API's own
requests log their queries as they are."""

import io
import logging
from collections.abc import Callable, Iterator

import httpx
import pytest

import rlnb
from rlnb import samples
from rlnb.remote.client import APIClient
from rlnb.secrets import presigned
from tests.support.checkpoint_storage import CID, Storage, client
from tests.support.fake_api import BASE, KEY, quick
from tests.support.server import running_server

SIGNATURE = "sig-5f1e2d3c4b5a69788796a5b4"


@pytest.fixture(params=["the root logger's handler", "configure_logging"])
def logged(request, caplog) -> Iterator[Callable[[], str]]:
    """What httpx logs at INFO, as a notebook's ``logging.basicConfig`` (caplog's handler on the root logger) or
    ``rlnb.configure_logging`` (its stream) prints it."""
    if request.param == "the root logger's handler":
        caplog.set_level(logging.INFO, logger="httpx")
        yield lambda: caplog.text
        return
    loggers = [logging.getLogger(n) for n in ("rlnb", "httpx", "httpcore")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    out = io.StringIO()
    handler = rlnb.configure_logging("INFO", stream=out)
    try:
        yield out.getvalue
    finally:
        for lg, (level, propagate) in zip(loggers, saved, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate


def storage_and_api(request: httpx.Request) -> httpx.Response:
    """An API that hands out presigned URLs on another host, and that host, which keeps what is PUT."""
    if request.url.host == "storage.test":
        return httpx.Response(200, content=request.content if request.method == "PUT" else b'{"x": 1}')
    if request.url.path.endswith("/upload-url"):
        return httpx.Response(200, json={"payload_id": "p1", "upload_url": f"https://storage.test/p1?sig={SIGNATURE}"})
    return httpx.Response(200, json={"download_url": f"https://storage.test/p1?X-Amz-Signature={SIGNATURE}&e=9"})


def test_a_payloads_upload_and_download_log_no_signature(logged):
    with APIClient(BASE, KEY, transport=httpx.MockTransport(storage_and_api), **quick({})) as c:
        assert c.download_payload("s1", c.upload_payload("s1", b'{"x": 1}')) == {"x": 1}
    text = logged()
    assert 'HTTP Request: PUT https://storage.test/p1?*** "HTTP/1.1 200 OK"' in text
    assert 'HTTP Request: GET https://storage.test/p1?*** "HTTP/1.1 200 OK"' in text
    assert "HTTP Request: POST https://rl.test/v1/rl/training-sessions/s1/payloads/upload-url" in text  # the API's
    assert SIGNATURE not in text


def test_a_checkpoint_files_url_logs_no_signature_and_the_apis_query_is_kept(logged, tmp_path):
    storage = Storage({"model.safetensors": b"x" * 10})
    with client(storage) as c:
        c.download_checkpoint(CID, tmp_path)
    text = logged()
    assert f"GET {BASE}/v1/rl/checkpoints/{CID}/download?variant=CHECKPOINT_VARIANT_MERGED" in text  # as it was
    assert "GET https://storage.test/f/1-0?*** " in text
    assert "secret-signature" not in text and storage.file_gets()[0].url.params["sig"] == "secret-signature"


def test_a_redirect_hops_signatures_are_masked_too(logged):
    """A presigned URL's redirect points to another signed URL (a CDN's): each hop's line is masked."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.test":
            return httpx.Response(302, headers={"Location": f"https://cdn.test/p1?token={SIGNATURE}"})
        if request.url.host == "cdn.test":
            return httpx.Response(200, json={"y": 2})
        return storage_and_api(request)

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler), **quick({})) as c:
        assert c.download_payload("s1", "p1") == {"y": 2}
    text = logged()
    assert "GET https://storage.test/p1?*** " in text and "GET https://cdn.test/p1?*** " in text
    assert SIGNATURE not in text


@pytest.mark.parametrize("name", ["httpcore.http11", "hpack.hpack", "h2.connection", "httpx"])
def test_a_path_or_location_in_a_debug_line_is_masked_only_while_a_presigned_request_is_sent(caplog, name):
    """httpcore's DEBUG lines quote a redirect's ``Location`` among the headers, hpack's the request's ``:path``."""
    caplog.set_level(logging.DEBUG, logger=name)
    headers = [(b":path", f"/p1?sig={SIGNATURE}".encode()), (b"Location", f"https://cdn.test/x?t={SIGNATURE}".encode())]
    with presigned.sending():
        logging.getLogger(name).debug("headers %s", headers)
    logging.getLogger(name).debug("GET %s", "https://rl.test/v1/rl/x?wait=5")  # the API's: as it is
    masked, kept = (r.getMessage() for r in caplog.records[-2:])
    assert masked == "headers [(b':path', b'/p1?***'), (b'Location', b'https://cdn.test/x?***')]"
    assert kept == "GET https://rl.test/v1/rl/x?wait=5"


@pytest.mark.slow  # rlnb serve in a subprocess
def test_rlnb_serves_presigned_links_log_no_signature(caplog):
    """rlnb serve's payload links are on its own origin (``/v1/rl/payloads/...?expires=...&sig=...``): a result
    offloaded past 200 bytes and a batch past the upload threshold log their requests with the query masked."""
    caplog.set_level(logging.INFO, logger="httpx")
    batch = [samples.cross_entropy(list(b"hello") * 50)] * 250
    with running_server("--offload-results-over", "200") as url, rlnb.connect(url, base_model="rlnb/tiny") as s:
        assert len(s.forward_backward(batch, return_loss_fn_outputs=True).result(120).loss_fn_outputs) == 250
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx" and "/v1/rl/payloads/" in r.getMessage()]
    assert [line.split()[2] for line in lines] == ["PUT", "GET"], lines  # the upload, the result's download
    assert all("?*** " in line and "sig=" not in line for line in lines), lines
    assert "sig=" not in caplog.text
