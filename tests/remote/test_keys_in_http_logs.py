"""httpcore's DEBUG log lists every response header, so a server or proxy that echoes the Authorization header put the
key in it; its records went to the root logger's handlers (a notebook's ``logging.basicConfig(level=DEBUG)``, pytest's
caplog) as written unless ``rlnb.configure_logging`` or a ``RedactingFilter`` of the user's own was in place. rlnb now
puts its filter on httpx's and httpcore's own loggers, masking only the keys it registered, and leaves every level,
handler and propagation as it was."""

import logging
import socket
import subprocess
import sys
import threading

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from rlnb.secrets import redaction
from tests.support.fake_api import KEY
from tests.support.hostile import Loopback, write_response


def echoing(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
    """Answer 401 with the Authorization header echoed in a response header."""
    sent = request.headers.get("authorization", "")
    write_response(conn, httpx.Response(401, content=b'{"error": {"message": "no"}}', headers={"x-echo": sent}))


def test_httpcore_debug_records_on_the_root_logger_never_show_the_key(caplog):
    caplog.set_level(logging.DEBUG, logger="httpcore")
    caplog.set_level(logging.DEBUG, logger="httpx")
    with (
        Loopback(echoing) as server,
        APIClient(server.url, KEY, max_retries=0) as client,
        pytest.raises(rlnb.AuthenticationError),
    ):
        client.supported_models()
    mine = [r for r in caplog.records if r.name.startswith(("httpcore.", "httpx"))]
    text = "\n".join(r.getMessage() for r in mine)
    assert "receive_response_headers.complete" in text and "x-echo" in text  # httpcore logged the header
    assert "HTTP Request: GET" in text  # httpx's own line passes through
    assert "Bearer ***" in text and KEY not in text and KEY not in caplog.text


FRESH_IMPORT = """
import logging
from rlnb.secrets import redaction
for name in redaction.HTTP_LOGGERS:
    logger = logging.getLogger(name)
    assert any(isinstance(f, redaction.RedactingFilter) for f in logger.filters), name
    assert (logger.level, logger.handlers, logger.propagate) == (logging.NOTSET, [], True), name
"""


@pytest.mark.slow  # a fresh Python: other tests (configure_logging) set these loggers' levels in this one
def test_the_filter_changes_no_level_handler_or_propagation_of_the_http_loggers():
    done = subprocess.run([sys.executable, "-c", FRESH_IMPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_text_without_a_registered_key_is_logged_as_it_is(caplog):
    caplog.set_level(logging.DEBUG, logger="httpcore")
    logging.getLogger("httpcore.http11").debug("header %s", "Bearer not-a-registered-key-123")
    assert caplog.records[-1].getMessage() == "header Bearer not-a-registered-key-123"


@pytest.mark.parametrize("name", ["hpack", "hpack.hpack", "hpack.table", "h2", "h2.connection"])
def test_the_http2_loggers_mask_the_key_in_what_they_log(caplog, name):
    """hpack's DEBUG log lists every header it encodes, the Authorization header included (``http2=True``), and its
    records went out as written: h2 and hpack are not installed here, so each is logged to by its logger's name."""
    redaction.register(KEY)
    caplog.set_level(logging.DEBUG, logger=name)
    logging.getLogger(name).debug("Encoding %s", [("authorization", f"Bearer {KEY}")])
    assert caplog.records[-1].getMessage() == "Encoding [('authorization', 'Bearer ***')]"
