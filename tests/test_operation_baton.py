"""``Operation.result()`` when the end's lock is left taken: a Ctrl-C between a waiter taking ``_done`` and passing it
on, or between an end's ``_ended`` and its release, must not make any later or concurrent wait last for ever."""

import threading

import pytest

from rlnb import wire
from rlnb.errors import OperationTimeout
from rlnb.session import operation
from rlnb.session.operation import BATON, Operation


def ended(output: object) -> Operation[object]:
    op: Operation[object] = Operation(wire.OperationKind.SAMPLE)
    op._update(wire.Operation(id="op-1", status=wire.OperationStatus.COMPLETED, output=output))
    return op


def test_a_wait_after_a_waiter_was_interrupted_holding_the_end_returns_at_once():
    op = ended({"x": 1})
    assert op._done.acquire(False)  # the interrupted waiter: took it, never passed it on
    assert op.result(timeout=10 * BATON) == {"x": 1}  # was a 5 s wait and OperationTimeout (no timeout: for ever)


def test_a_waiter_already_waiting_sees_an_end_whose_release_was_interrupted(monkeypatch):
    monkeypatch.setattr(operation, "BATON", BATON / 10)  # the same hand-over, a tenth of the wait for it
    op: Operation[object] = Operation(wire.OperationKind.SAMPLE)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(op.result(timeout=60)), daemon=True)
    waiter.start()
    op._output, op._ended = 7, True  # the end, stopped before ``_done.release()``
    waiter.join(timeout=20 * BATON)
    assert got == [7]  # was still waiting: the 60 s, then OperationTimeout


def test_a_wait_that_runs_out_still_says_so():
    op: Operation[object] = Operation(wire.OperationKind.SAMPLE)
    with pytest.raises(OperationTimeout, match="still"):
        op.result(timeout=0.05)
