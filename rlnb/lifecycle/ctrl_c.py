"""A Ctrl-C held over a few lines that must finish together, then raised: a submission recorded and handed over
(else a record PENDING for ever), ``rl_step``'s three operations sent (else a forward-backward that the next step's
optim-step applies too), a step's turn taken and its holder recorded (else a turn held for good).

Only on the main thread under Python's own SIGINT handler: no Ctrl-C reaches another thread, and another handler is
its owner's. C calls only (``_signal``, ``_thread``): a submission's Python calls are counted
(``tests/engine/test_step_calls.py``), and ``signal.signal`` wraps them in Python calls."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _thread
import contextlib
import functools
import signal
import threading
from collections.abc import Iterator

_MAIN, _SIGINT = threading.main_thread().ident, int(signal.SIGINT)
unhold = functools.partial(_signal.signal, _SIGINT, _signal.default_int_handler)
"""Python's own SIGINT handler again, a C call (``restore`` without raising, for a hot path that raises itself)."""


def hold() -> list[int] | None:
    """Hold a Ctrl-C from now until ``restore``: the list it fills when one comes (None: nothing is held here, or an
    outer ``hold`` holds it already). ``signal.signal`` runs a signal pending before it, so none is lost."""
    if _thread.get_ident() != _MAIN or _signal.getsignal(_SIGINT) is not _signal.default_int_handler:
        return None
    pressed: list[int] = []
    _signal.signal(_SIGINT, lambda signum, frame: pressed.append(signum))
    return pressed


def restore(pressed: list[int] | None) -> None:
    """Python's own SIGINT handler again, where ``hold`` held; then raise the Ctrl-C it held, if one came (in an
    ``except`` or ``finally`` block, with the exception in flight as its context: never lost to another error)."""
    if pressed is not None:
        unhold()
        if pressed:
            raise KeyboardInterrupt


@contextlib.contextmanager
def held() -> Iterator[None]:
    """``with held():`` lines that make one whole, a Ctrl-C held until the block ends, then raised (in a block that
    holds already, nothing more is held: the outer one raises it)."""
    pressed = hold()
    try:
        yield
    finally:
        restore(pressed)
