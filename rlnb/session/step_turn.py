"""One step at a time on a session (``Session.stepping``). A session's forward-backwards accumulate until its next
optim-step, whichever thread submitted them: two threads stepping one session (a RunPanel's run and a cell, two
``threading`` workers) interleaved their calls, and one optim-step applied both steps' gradients while the other
applied none, the history showing two steps. ``rlnb.tasks.rl_step`` holds the turn from its samples to its end."""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterator

from rlnb._input.checks import check_timeout
from rlnb.errors import SessionBusy
from rlnb.lifecycle import ctrl_c

STEP_WAIT = 600.0
"""Seconds a step waits for another thread's step on the same session before ``SessionBusy``: a step of a large
remote model takes minutes, and one that hangs must not hold the waiting thread (a notebook's kernel) for good."""


WAIT_SLICE = 0.05
"""Seconds between two calls of a waiting thread's ``told`` callback while another thread's step holds the turn."""

_TOLD: contextvars.ContextVar[Callable[[threading.Thread], object] | None] = contextvars.ContextVar(
    "rlnb_step_told", default=None
)


@contextlib.contextmanager
def told(waiting: Callable[[threading.Thread], object]) -> Iterator[None]:
    """In the block, this thread's wait for another thread's step calls ``waiting(holder)`` (the thread in the middle of
    its step) at once and every ``WAIT_SLICE`` s until the turn is its own; what ``waiting`` raises ends the wait. A
    RunPanel says so while it waits for a cell's step, and its Stop ends the wait (the line said the run was running,
    and a Stop was heard only once the cell's step ended, up to ``STEP_WAIT`` later)."""
    token = _TOLD.set(waiting)
    try:
        yield
    finally:
        _TOLD.reset(token)


class StepTurn:
    """The turn of one session's steps: re-entrant on its thread (a step function that holds it may call ``rl_step``),
    and who holds it since when, for the error of a thread that waited past its deadline. A plain lock, not an
    ``RLock``: a block that ends on another thread than the one that took it (a generator suspended in it, closed or
    collected elsewhere) still releases it, and a turn whose thread ended in the middle of its block (that generator,
    driven by a thread that ended) is taken over with a ``RuntimeWarning``: neither can be left held for good."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self._lock = threading.Lock()
        self._meta = threading.Lock()  # who holds it: changed by its holder, or by a thread taking an ended one's turn
        self._holder: threading.Thread | None = None  # the thread in the middle of a step; None between steps
        self._since = 0.0
        self._depth = 0
        self._taken = 0  # counts each take: a block whose turn was taken over releases nothing

    @contextlib.contextmanager
    def hold(self, timeout: float | None = STEP_WAIT) -> Iterator[None]:
        """Hold the turn for the block: wait for another thread's step to end, at most ``timeout`` seconds (None: no
        limit), then ``SessionBusy`` naming the thread in the middle of its step."""
        limit = check_timeout("timeout", timeout)
        me = threading.current_thread()
        with self._meta:
            mine = self._holder is me
            if mine:
                self._depth += 1
                taken = self._taken
        if not mine:
            taken = self._take(me, limit, timeout)
        try:
            yield
        finally:
            with self._meta:
                if taken == self._taken:  # else an ended thread's block, whose turn another thread took over
                    self._depth -= 1
                    if self._depth == 0:
                        self._holder = None  # before the release: a waiter is never told of a step that has ended
                        self._lock.release()

    def _take(self, me: threading.Thread, limit: float | None, timeout: float | None) -> int:
        """The turn, waited for at most ``limit`` seconds (None: no limit), this thread's ``told`` callback called as
        ``told`` says; taken over from a holder that has ended. Returns its take's count. A Ctrl-C is held over each
        try (at most ``WAIT_SLICE``): between the acquire and the record of its holder it would leave the turn held
        for good, by no thread (no takeover then); one that came is raised with the turn let go."""
        waiting = _TOLD.get()
        end = math.inf if limit is None else time.monotonic() + limit
        wait, ended = 0.0, None  # the first try does not wait
        while True:
            taken, pressed = 0, ctrl_c.hold()
            try:
                if self._lock.acquire(timeout=wait) if wait else self._lock.acquire(blocking=False):
                    with self._meta:
                        taken = self._record(me)
                else:
                    holder = self._holder
                    if holder is not None and not holder.is_alive():
                        with self._meta:
                            if self._holder is holder:  # still: no other waiter took it over first
                                taken, ended = self._record(me), holder
            finally:
                try:
                    ctrl_c.restore(pressed)
                except KeyboardInterrupt:
                    if taken:
                        self._let_go(taken)
                    raise
            if ended is not None:  # outside ``_meta``: a warning's hooks may run what takes it (a collected block)
                warnings.warn(
                    f"thread {ended.name!r} ended in the middle of a step on session {self.session_id} (inside "
                    "session.stepping(): a generator it drove?); this step takes the turn over, and its optim-step "
                    "applies any forward-backward that thread submitted without one",
                    RuntimeWarning,
                    stacklevel=4,  # _take, hold, contextlib's __enter__, the line that takes the turn
                )
            if taken:
                return taken
            left = end - time.monotonic()
            if left <= 0:
                holder = self._holder  # None: a step that began or ended just now
                on = (
                    f"thread {holder.name!r} (for {time.monotonic() - self._since:.1f} s)"
                    if holder
                    else "another thread"
                )
                raise SessionBusy(
                    f"session {self.session_id} is in the middle of a step on {on}; this thread waited {timeout} s for "
                    "it to end. One step at a time: its forward-backward's gradients are applied by its own optim-step"
                )
            holder = self._holder
            if waiting is not None and holder is not None:  # None: the new holder has not recorded itself yet
                waiting(holder)
            wait = min(WAIT_SLICE, left)

    def _record(self, me: threading.Thread) -> int:
        """Record ``me`` as the holder (the caller holds ``_meta``). Returns the take's count."""
        self._holder, self._since, self._depth = me, time.monotonic(), 1
        self._taken += 1
        return self._taken

    def _let_go(self, taken: int) -> None:
        """Undo take ``taken`` (a Ctrl-C came as it was taken): no holder, the turn free."""
        with self._meta:
            if taken == self._taken:
                self._holder, self._depth = None, 0
                self._lock.release()
