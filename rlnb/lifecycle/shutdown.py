"""One ordered interpreter-exit hook, so that a script may exit mid-run and keep every record.

rlnb's pieces are imported lazily and ``atexit`` runs hooks last-registered first, so separate hooks
would run in whatever order the imports happened (a session's worker could close under a RunPanel's
step). Instead each piece adds its step to a phase, and the phases run in this order: running panels
stop after their step, sessions close (failing what is still queued ``SESSION_NOT_ACTIVE``, recorded),
workers stop, then sinks flush everything, those last records included.

A SIGTERM while these steps run hurries them (``hurried``): a Jupyter kernel's Shut Down sends one 2.5 s after its
request and SIGKILL at 5 s, and by default SIGTERM killed the process mid-wait, its operations left PENDING for good
and a remote session running. The waits then end at once and what is in flight is recorded FAILED. A Ctrl-C in a step
(a script that seems to hang at its end) hurries the steps left the same way, and ends the sinks' flush it lands in:
escaping, it skipped every later step (records PENDING, sinks unflushed, often SIGABRT under a torch op). And once a
session opens, a SIGTERM or SIGHUP that would kill the process at once (nothing recorded) exits through these steps,
hurried, with status 143 or 129 (``end_on_termination``).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Literal

from rlnb.lifecycle import threads

Phase = Literal["panels", "sessions", "workers", "sinks"]
PHASES: tuple[Phase, ...] = ("panels", "sessions", "workers", "sinks")

log = logging.getLogger("rlnb")
_STEPS: dict[Phase, list[Callable[[], None]]] = {phase: [] for phase in PHASES}
_EXITING = threading.Event()
_HURRY = threading.Event()
CHUNK = 0.1
"""Seconds between two looks at ``hurried`` in an exit's wait."""


def on_exit(phase: Phase, step: Callable[[], None]) -> None:
    """Run ``step`` at interpreter exit, in ``phase``'s turn."""
    _STEPS[phase].append(step)


def exiting() -> bool:
    """Whether interpreter exit has begun running these steps (a wait without a limit then gets one)."""
    return _EXITING.is_set()


def ending() -> bool:
    """Whether the interpreter's exit has begun: ``exiting``, or the main thread has ended (a Ctrl-C, the script's
    last line). A library's own exit hooks (torch's compile workers) run before these steps (registered after them,
    run first), so a worker thread may meet their failures before ``exiting``: they are the exit's, not the work's."""
    return _EXITING.is_set() or not threading.main_thread().is_alive()


def hurried() -> bool:
    """Whether a SIGTERM or a Ctrl-C came while the exit's steps ran, or a SIGTERM or SIGHUP ended the process before
    (``end_on_termination``: a ``with session:`` block's close runs first): wait for no step or operation any more."""
    return _HURRY.is_set()


def wait(done: Callable[[float], bool], timeout: float) -> bool:
    """Call ``done(seconds)`` (a wait of at most that long, True once what it waits for has ended) until it is True;
    False after ``timeout`` seconds or once a SIGTERM hurried the exit."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if done(max(0.0, min(CHUNK, left))):
            return True
        if left <= 0 or _HURRY.is_set():
            return False


def join(thread: threads.Thread, timeout: float, what: str = "") -> bool:
    """Join ``thread`` for at most ``timeout`` seconds, less once a SIGTERM hurried the exit; whether it ended.
    ``what`` (the exit's waits): said on stderr if it has not ended at the first look, else a silent wait of up to a
    minute read as a hang."""
    if what:
        thread.join(CHUNK)
    if what and thread.is_alive():
        say_waiting(what, timeout)

    def ended(seconds: float) -> bool:
        thread.join(seconds)
        return not thread.is_alive()

    return wait(ended, timeout)


def say_waiting(what: str, timeout: float) -> None:
    """One stderr line as an exit's wait begins (unless hurried): a silent wait of up to a minute reads as a hang."""
    if not _HURRY.is_set():
        print(f"rlnb: {what} before exit, up to {timeout:.0f} s; Ctrl-C to abandon it", file=sys.stderr, flush=True)


def interrupted() -> None:
    """A Ctrl-C in an exit step: the steps left run hurried (their waits end, what runs is recorded FAILED); said
    once."""
    if not _HURRY.is_set():
        print("rlnb: interrupted: exiting without waiting; what still runs is recorded FAILED", file=sys.stderr,
              flush=True)  # fmt: skip
    _HURRY.set()


def _run() -> None:
    _EXITING.set()
    if _TERMINATED.is_set():  # the exit a SIGTERM or SIGHUP began (``end_on_termination``) is a hurried one
        _HURRY.set()
    previous = _hurry_at_termination()
    try:
        for phase in PHASES:
            for step in _STEPS[phase]:
                try:
                    step()
                except KeyboardInterrupt:  # a Ctrl-C in a step: the others still run, hurried
                    interrupted()
                except Exception:  # noqa: BLE001 - exit goes on: one step's failure must not skip the others
                    log.exception("rlnb: an exit step (%s) failed", phase)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_TERMINATED = threading.Event()
_ENDING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
"""The signals that end the process by default (SIGHUP: the terminal closed; none on Windows)."""


def _terminate(signum: int, frame: object) -> None:
    """A SIGTERM or SIGHUP: the ordered exit, hurried, with the shell's status for it (143, 129); hurried from here,
    since a ``with session:`` or ``try/finally`` closes before the exit's steps and waited out the running step.
    IPython started since (``IPython.embed()``) would catch the SystemExit: the default ends it instead."""
    if _in_ipython():
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _TERMINATED.set()
    _HURRY.set()
    raise SystemExit(128 + signum)


def end_on_termination() -> None:
    """Make a SIGTERM or SIGHUP end the process through the exit's steps (hurried: what runs is recorded FAILED), not
    kill it with nothing recorded (its operations PENDING for good): on the main thread (a session opened there),
    where the handler is the default; a handler of the user's or a framework's (uvicorn's, a kernel's) stays. Not under
    IPython (a Jupyter kernel): it catches the SystemExit a cell raises, so the kernel lived on, told to end, and its
    later exit was hurried; its default ends it at once (its Shut Down's SIGTERM still hurries the exit's steps)."""
    if threading.current_thread() is not threading.main_thread() or _in_ipython():
        return
    try:
        for signum in _ENDING:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _terminate)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        return


def _in_ipython() -> bool:
    """Whether IPython runs this process (a Jupyter kernel, the ``ipython`` shell); never imports it."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    return get_ipython is not None and get_ipython() is not None


def _hurry_at_termination() -> dict[int, signal.Handlers]:
    """Make a SIGTERM or SIGHUP set ``hurried`` while the steps run, where it would kill the process or raise (its
    default handler, or ``end_on_termination``'s, on the main thread): a handler of the user's stays. The handlers it
    replaced, to put back."""
    replaced: dict[int, signal.Handlers] = {}
    if threading.current_thread() is not threading.main_thread():
        return replaced
    try:
        for signum in _ENDING:
            handler = signal.getsignal(signum)
            if handler is signal.SIG_DFL or handler is _terminate:
                signal.signal(signum, lambda *_: _HURRY.set())
                replaced[signum] = handler  # type: ignore[assignment]
    except (ValueError, OSError):  # no signals here (an embedded interpreter): exit as before
        pass
    return replaced


def run_first() -> None:
    """Register the hook again, after a library registered its own (W&B tears its service down at
    exit), so that rlnb closes its runs and flushes into that library before it goes."""
    atexit.unregister(_run)
    atexit.register(_run)


atexit.register(_run)
