"""A Ctrl-C while the command line imports its libraries: held until the import is done, then raised.

A ``KeyboardInterrupt`` raised inside an import is not always one where it surfaces. torch's C initialisation imports
numpy, and when that import is interrupted torch clears the error with a warning and goes on with a half-imported
numpy: the Ctrl-C is lost (``rlnb demo`` runs to its end, ``rlnb serve`` starts serving), or comes back later as an
unrelated error (``rlnb demo: initialization failed``, exit 2, from matplotlib's C extension; an ``AttributeError``
traceback from pandas). So while the command line runs, a Ctrl-C that arrives inside an import is held until the
outermost import returns, then raised as usual (one line, exit status 130). A third Ctrl-C while still importing is
raised at once, so that an import that hangs can still be interrupted.

A Ctrl-C the process was started to ignore stays ignored: a shell starts a background job (``rlnb serve &``) with
SIGINT ignored, and Python keeps that; the handler that goes in ~40 ms later would honour it from then on
(``ignored``).

This module imports nothing slow (``signal`` and what Python has loaded already): the handler goes in before the
command line imports anything else.
"""

from __future__ import annotations

import _thread
import signal
import sys
import time
from types import FrameType, TracebackType

HELD_PRESSES = 2
"""Ctrl-Cs held while an import runs; the next one is raised inside it."""

POLL_S = 0.01
"""How often a held Ctrl-C looks whether the import has returned."""

_IMPORT_MACHINERY = "<frozen importlib."


def ignored(signum: int) -> bool:
    """Whether ``signum`` is ignored, as the process that started this one left it (a shell's background job: SIGINT;
    ``nohup``: SIGHUP): the command line's handlers leave it so, so that it is ignored throughout, not only until a
    handler goes in. SIGTERM, the way to stop a background server, is handled either way."""
    return signal.getsignal(signum) is signal.SIG_IGN


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a frame that called it is Python's import machinery (a module is being imported)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
            return True
        frame = frame.f_back
    return False


class HeldDuringImports:
    """``with HeldDuringImports(): ...``: SIGINT raises ``KeyboardInterrupt``, as Python's own handler does, except
    inside an import (see the module). The previous handler is back at the end of the block; a Ctrl-C still held
    then is raised there. An ignored SIGINT stays ignored (``ignored``): nothing is installed."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._presses = 0
        self._held = self._waiting = self._redelivered = self._closed = self._installed = False
        self._previous: object = None

    def __enter__(self) -> HeldDuringImports:
        if not ignored(signal.SIGINT):
            self._previous, self._installed = signal.signal(signal.SIGINT, self._handle), True
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._lock:  # no redelivery starts after this
            self._closed = True
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]  # what signal.signal returned
        if kind is None and self._held:
            raise KeyboardInterrupt

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT's handler, on the main thread (no lock here: the main thread may hold it)."""
        redelivered, self._redelivered = self._redelivered, False
        if not redelivered:
            self._presses += 1
        elif self._closed:  # the block ended meanwhile: __exit__ raises it
            return
        if not self._closed and self._presses <= HELD_PRESSES and importing(frame):
            self._held = True
            if not self._waiting:
                self._waiting = True
                _thread.start_new_thread(self._redeliver, (_thread.get_ident(),))
            return
        self._held, self._presses = False, 0  # raised: nothing is held any more
        raise KeyboardInterrupt

    def _redeliver(self, main: int) -> None:
        """On a thread of its own: once the main thread has left every import, deliver the held Ctrl-C to it."""
        while True:
            time.sleep(POLL_S)
            frame = sys._current_frames().get(main)
            if frame is None or not importing(frame):
                break
            del frame  # no reference to the main thread's frames while it runs
        with self._lock:
            self._waiting = False
            if self._held and not self._closed:  # not raised meanwhile (a third Ctrl-C)
                self._redelivered = True
                _thread.interrupt_main(signal.SIGINT)
