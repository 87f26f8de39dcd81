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


def _ended_holding(turn: StepTurn, name: str):
    """A generator suspended inside ``turn.hold()`` (a training loop written as one), driven by a thread that ended."""

    def steps():
        with turn.hold():
            yield

    loop = steps()
    thread = threading.Thread(target=next, args=(loop,), name=name)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive()
    return loop


def test_a_turn_held_by_a_thread_that_ended_is_taken_with_a_warning():
    """Every later step waited its whole timeout (600 s by default), then ``SessionBusy`` naming a thread that had
    ended: the session could never step again."""
    turn = StepTurn("s")
    loop = _ended_holding(turn, "ended-loop")
    words = "thread 'ended-loop' ended in the middle of a step on session s"
    with pytest.warns(RuntimeWarning, match=words) as caught, turn.hold(timeout=DEADLINE):
        pass
    assert [w.filename for w in caught] == [__file__]  # the line that took the turn
    with turn.hold(timeout=0):  # free again
        pass
    loop.close()  # its block ends on this thread, long after: the turn is not its to release any more
    with turn.hold(timeout=0):
        pass


def test_a_turn_is_released_when_its_block_ends_on_another_thread():
    """A generator holding the turn, closed (or collected) on another thread than the one that took it: the release
    raised ``RuntimeError: cannot release un-acquired lock`` (ignored in a generator's close), and the turn stayed
    taken for good, refused as "in the middle of a step on another thread"."""
    turn = StepTurn("s")

    def steps():
        with turn.hold():
            yield

    loop = steps()
    next(loop)  # this thread takes it
    closer = threading.Thread(target=loop.close)
    closer.start()
    closer.join(DEADLINE)
    done: list[bool] = []
    other = threading.Thread(target=lambda: done.append(_takes(turn)))
    other.start()
    other.join(DEADLINE)
    assert done == [True]


def _takes(turn: StepTurn) -> bool:
    with turn.hold(timeout=0.2):
        return True


def test_a_ctrl_c_as_the_turn_is_taken_lets_it_go():
    """A Ctrl-C between the lock's acquire and the record of its holder (Python runs its handler at a call) left the
    turn held by no thread: no takeover (no holder that ended), and every later step, on any thread, waited its whole
    timeout and was refused ``SessionBusy``."""
    import signal

    turn = StepTurn("s")
    record = turn._record

    def ctrl_c_as_recorded(me: threading.Thread) -> int:
        taken = record(me)
        signal.raise_signal(signal.SIGINT)  # Python's handler would run here, on this (the main) thread
        return taken

    turn._record = ctrl_c_as_recorded  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt), turn.hold(timeout=DEADLINE):
        pass
    turn._record = record  # type: ignore[method-assign]
    assert (turn._holder, turn._lock.locked()) == (None, False)
    done: list[bool] = []
    other = threading.Thread(target=lambda: done.append(_takes(turn)))
    other.start()
    other.join(DEADLINE)
    assert done == [True] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_takeover_warning_is_given_with_the_turns_own_lock_free():
    """The warning was given holding ``_meta``, a plain lock: a ``showwarning`` hook (logging's, ipykernel's) or a
    garbage collection there that ended the ended thread's block took ``_meta`` again on this thread: a deadlock,
    every later step blocked with no deadline."""
    import warnings

    turn = StepTurn("s")
    loop = _ended_holding(turn, "ended-loop")
    free: list[bool] = []

    def hook(*args, **kwargs) -> None:
        got = turn._meta.acquire(timeout=1)
        free.append(got)
        if got:
            turn._meta.release()

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = hook
        with turn.hold(timeout=DEADLINE):
            pass
    assert free == [True]
    loop.close()
