"""A Ctrl-C that lands while an operation is submitted (a tight loop of submissions spends most of its time there):
the operation is recorded as it is sent, whole or not at all."""

from __future__ import annotations

import signal

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"hello"))]


@pytest.mark.parametrize("kind", ["forward_backward", "optim_step"])
def test_a_ctrl_c_while_an_operation_is_recorded_as_submitted_loses_nothing(tmp_path, kind):
    """It landed in the PENDING line's write, after the record was made and before the backend had the operation: the
    record stayed PENDING for ever (the history, the run folder), for an operation that never ran (30 interrupted
    loops of ``forward_backward`` + ``optim_step``: 2 of the first 4 did so)."""
    s = rlnb.Session(FakeBackend("adam"), runs_dir=tmp_path, run_id="r")
    s.forward_backward(BATCH).result(30)
    store, real = s.history.store, s.history.store.write_record
    pressed = []

    def ctrl_c_in_the_write(rec) -> None:
        if not pressed and rec.status == wire.OperationStatus.PENDING:  # its submission's line
            pressed.append(rec.kind)
            signal.raise_signal(signal.SIGINT)  # Python's handler runs at once, on this (the main) thread
        real(rec)

    store.write_record = ctrl_c_in_the_write  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        getattr(s, kind)(BATCH) if kind == "forward_backward" else s.optim_step()
    store.write_record = real  # type: ignore[method-assign]
    s.wait(30)
    s.close()
    assert pressed == [wire.OperationKind(kind.replace("_", "-"))]
    for history in (s.history, rlnb.History.load(tmp_path / "r")):
        assert list(history.df.status) == [wire.OperationStatus.COMPLETED] * 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_held_while_the_submission_raises_is_raised_not_lost(tmp_path):
    """A Ctrl-C held through a submission whose backend then refused it (a body it cannot encode): the refusal
    propagated and the Ctrl-C was dropped, so a loop that catches the refusal went on as if none was pressed."""
    s = rlnb.Session(FakeBackend("adam"), runs_dir=tmp_path, run_id="r")
    real = s.backend.submit

    def pressed_then_refused(kind, body, listener) -> None:
        signal.raise_signal(signal.SIGINT)  # held: the handler only notes it
        raise ValueError("a body it cannot encode")

    s.backend.submit = pressed_then_refused  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt) as raised:
        s.forward_backward(BATCH)
    assert isinstance(raised.value.__context__, ValueError)
    s.backend.submit = real  # type: ignore[method-assign]
    s.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
