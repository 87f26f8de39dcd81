"""``StepTurn`` names the thread in the middle of a step only while that step goes on: a waiter is never told of, nor
refused naming, a thread whose step has ended (it named the last holder, kept after its release: a RunPanel's
``join()`` from that thread was refused as if it held the turn)."""

import threading

import pytest

from rlnb.errors import SessionBusy
from rlnb.session.step_turn import StepTurn, told
from tests.support.gated_steps import DEADLINE


def test_a_waiter_is_never_told_of_a_thread_whose_step_has_ended():
    turn = StepTurn("s")

    def old_cell() -> None:
        with turn.hold():
            pass

    ended = threading.Thread(target=old_cell, name="old-cell")
    ended.start()
    ended.join(DEADLINE)
    taken, free = threading.Event(), threading.Event()

    def between_acquire_and_record() -> None:  # a new holder in the window before it records itself
        with turn._lock:
            taken.set()
            free.wait(DEADLINE)

    new = threading.Thread(target=between_acquire_and_record, name="new")
    new.start()
    assert taken.wait(DEADLINE)
    seen: list[threading.Thread] = []
    try:
        with told(seen.append), pytest.raises(SessionBusy) as refused, turn.hold(timeout=0.1):
            pass
    finally:
        free.set()
        new.join(DEADLINE)
    assert ended not in seen and "old-cell" not in str(refused.value)
    with turn.hold(timeout=0):  # free again
        pass
