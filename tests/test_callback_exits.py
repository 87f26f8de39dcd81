"""A ``history.on_record`` callback that raises what is no ``Exception`` (``sys.exit()``, ``pytest.fail()``, a
``KeyboardInterrupt`` raised by hand) on the thread that runs or reports the session's operations: that thread must
go on, or every operation of the session waits for ever."""

from __future__ import annotations

import logging

import httpx
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.engine.backend import LocalBackend
from rlnb.testing import FakeBackend
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI

BATCH = [samples.cross_entropy(list(b"hello"))]
DEADLINE = 30.0


def _local() -> rlnb.Session:
    return rlnb.Session(LocalBackend("adam", "tiny", device="cpu", seed=0), record=False)


def _fake() -> rlnb.Session:
    return rlnb.Session(FakeBackend("adam"), record=False)


def _remote() -> rlnb.Session:
    return rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(FakeAPI()), record=False, **FAST_POLL)


@pytest.mark.parametrize("open_session", [_local, _fake, _remote], ids=["local", "fake", "remote"])
@pytest.mark.parametrize("exc", [SystemExit(2), KeyboardInterrupt()], ids=["exit", "interrupt"])
def test_a_callback_that_exits_on_the_sessions_thread_is_logged_and_the_session_goes_on(open_session, exc, caplog):
    """The worker (or poll) thread ended with the callback's ``SystemExit`` (silently: threading prints none): the
    operation stayed RUNNING, everything queued PENDING, and ``result()`` without a timeout waited for ever."""
    session = open_session()
    raised: list[str] = []

    def exits(rec) -> None:
        if rec.status == wire.OperationStatus.RUNNING and not raised:
            raised.append(rec.kind)
            raise exc

    session.history.on_record(exits)
    with caplog.at_level(logging.ERROR, logger="rlnb"):
        ops = [session.forward_backward(BATCH), session.optim_step(), session.forward_backward(BATCH)]
        assert all(op.result(DEADLINE) is not None for op in ops)
        assert session.forward_backward(BATCH).result(DEADLINE).loss > 0
    session.close()
    assert raised and type(exc).__name__ in caplog.text and "recording" in caplog.text
    assert set(session.history.df.status) == {wire.OperationStatus.COMPLETED}
