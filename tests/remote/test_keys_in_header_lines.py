"""``sent.HeaderLogFilter`` on the HTTP loggers: a listed header whose value holds a ``'`` (Python then writes its
repr ``b"..."``) was shown whole, and a malformed log call on those loggers raised into the caller (the filters
formatted it) instead of going to logging's ``handleError``."""

import logging

import pytest

from rlnb.remote import sent  # noqa: F401 - its filter sits on the HTTP loggers
from rlnb.secrets import redaction


def test_a_listed_set_cookie_with_a_quote_in_it_is_masked(caplog):
    caplog.set_level(logging.DEBUG, logger="httpcore")
    headers = [(b"Set-Cookie", b"session=it's-s3cret-0123; Path=/"), (b"Set-Cookie", b"sid=plain-s3cret-42; Path=/")]
    logging.getLogger("httpcore.http11").debug(
        f"receive_response_headers.complete return_value={(b'HTTP/1.1', 200, b'OK', headers)!r}"
    )
    line = caplog.records[-1].getMessage()
    assert "it's-s3cret-0123" not in line and "plain-s3cret-42" not in line, line
    assert """b"session=***; Path=/")""" in line and "b'sid=***; Path=/'" in line, line


@pytest.mark.parametrize("name", ["httpx", "httpcore.http11"])
def test_a_malformed_log_call_on_an_http_logger_goes_to_handle_error_not_to_the_caller(name, capsys, monkeypatch):
    """A handler of the user's own (pytest's re-raise their errors): ``handleError`` prints the error, the key in the
    call's arguments masked."""
    logger = logging.getLogger(name)
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "level", logging.WARNING)
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    key = "sk-malformed-call-0123456789"
    redaction.register(key)
    try:
        logger.warning("%d items of %s", "x", key)  # raised TypeError into this line
        logger.warning("%d items", "x")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert err.count("--- Logging error ---") == 2 and key not in err, err


def test_a_line_that_only_looks_like_a_header_list_is_read_as_written(caplog):
    """A value that is no bytes literal (a broken escape): unescaping it raised from the filter."""
    caplog.set_level(logging.DEBUG, logger="httpcore")
    logging.getLogger("httpcore.http11").debug(r"odd (b'set-cookie', b'session=broken-escape-\x4') end")
    assert caplog.records[-1].getMessage() == "odd (b'set-cookie', b'session=***') end"
