"""A handler that renders a record's traceback itself, from ``exc_info`` (rich's ``RichHandler(rich_tracebacks=True)``
on the root logger, as most notebooks set rich up), printed the key that ``RedactingFilter`` had masked in the text the
standard formatters print (``exc_text``). A record whose traceback quotes a key, in a message or a frame's locals, now
carries only that masked text; one whose traceback holds none keeps its ``exc_info`` for such handlers to render."""

import io
import logging
from collections.abc import Iterator

import httpx
import pytest
from rich.console import Console
from rich.logging import RichHandler

import rlnb
from rlnb.secrets import redaction
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI

FAKE = FakeAPI()


@pytest.fixture
def rich_root(monkeypatch) -> Iterator[io.StringIO]:
    """A ``RichHandler`` with rich's tracebacks and their locals on the root logger; what it prints."""
    out = io.StringIO()
    handler = RichHandler(
        console=Console(file=out, width=300, color_system=None), rich_tracebacks=True, tracebacks_show_locals=True
    )
    monkeypatch.setattr(logging.getLogger("rlnb"), "propagate", True)  # configure_logging, elsewhere, turns it off
    logging.getLogger().addHandler(handler)
    try:
        yield out
    finally:
        logging.getLogger().removeHandler(handler)


def fail_holding(key: str) -> None:
    header = f"Bearer {key}"  # noqa: F841 - a local a traceback with locals shows
    raise RuntimeError("the listener broke")


def test_a_key_in_a_frames_locals_is_not_rendered_by_a_rich_handler(rich_root):
    redaction.register(KEY)
    try:
        fail_holding(KEY)
    except RuntimeError:
        logging.getLogger("rlnb").exception("listener raised")
    printed = rich_root.getvalue()
    assert "listener raised" in printed and "RuntimeError: the listener broke" in printed and "fail_holding" in printed
    assert KEY not in printed


def test_a_traceback_without_a_key_is_left_to_the_handler_to_render(rich_root):
    redaction.register(KEY)
    try:
        fail_holding("not-the-key-at-all")
    except RuntimeError:
        logging.getLogger("rlnb").exception("listener raised")
    printed = rich_root.getvalue()
    assert "Traceback (most recent call last)" in printed and "not-the-key-at-all" in printed  # rich's, with locals
    assert "╭" in printed  # rich's own box


@pytest.mark.slow  # a session, its failed poll and rich's traceback with every frame's locals: ~1 s
def test_a_polling_error_quoting_the_key_is_masked_by_a_rich_handler_on_the_root_logger(rich_root):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and "/forward-backward/" in request.url.path:
            raise RuntimeError(f"proxy refused the request with headers {dict(request.headers)}")
        return FAKE(request)

    session = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), record=False, **FAST_POLL)
    op = session.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])])
    with pytest.raises(rlnb.OperationFailed, match="polling failed"):
        op.result(10)
    session.close()
    printed = rich_root.getvalue()
    assert "Traceback" in printed and "proxy refused the request" in printed and "Bearer ***" in printed
    assert KEY not in printed


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def fail_with_an_unprintable_local(key: str) -> None:
    odd = Unprintable()  # noqa: F841 - a local whose repr raises
    header = f"Bearer {key}"  # noqa: F841
    raise RuntimeError("the listener broke")


def test_a_local_whose_repr_raises_neither_breaks_the_log_nor_hides_the_key(caplog):
    """The filter rendered every frame's locals with ``capture_locals=True``: one whose ``repr`` raises made
    ``log.exception`` raise out of the handler that meant to log and keep going."""
    redaction.register(KEY)
    logger = logging.getLogger("rlnb.test_unprintable")
    logger.addFilter(redaction.RedactingFilter())
    try:
        try:
            fail_with_an_unprintable_local(KEY)
        except RuntimeError:
            logger.exception("listener raised")
    finally:
        logger.filters.clear()
    (record,) = [r for r in caplog.records if r.name == "rlnb.test_unprintable"]
    assert record.exc_info is None and "RuntimeError: the listener broke" in record.exc_text
    assert KEY not in caplog.text
