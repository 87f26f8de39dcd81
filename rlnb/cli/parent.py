"""``rlnb serve --exit-with-stdin``: the server stops when the process that started it is gone, however it went.

A parent that is SIGKILLed (a hung notebook kernel restarted, the OOM killer) runs no finalizer, so the server it
started kept its port, its memory and its GPU for ever. The parent holds the write end of the server's stdin pipe;
the operating system closes it when the parent exits, by any means, and the server reads its end. (Linux's
``PR_SET_PDEATHSIG`` fires when the *thread* that forked exits, not the process, and exists nowhere else.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

STDIN = 0


def exit_with_stdin(enabled: bool) -> None:
    """When ``enabled``, watch stdin on a daemon thread and, at its end, stop as at SIGTERM (``_watch``)."""
    if enabled:
        threading.Thread(target=_watch, args=(STDIN,), name="rlnb-exit-with-stdin", daemon=True).start()


def _watch(fd: int) -> None:
    """Read ``fd`` until its end (what the parent writes is ignored), then say so and raise SIGTERM in this process:
    the server's own SIGTERM path (its operations finished or abandoned, its temporary checkpoints removed) runs on
    the main thread, as if ``kill`` had sent it. A stdin that is not open ends at once."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # closed or never opened (EBADF): no parent holds it
        pass
    with contextlib.suppress(OSError, ValueError):  # stderr gone with the parent: stop all the same
        print("rlnb serve: stdin closed (--exit-with-stdin: the process that started it has exited): stopping",
              file=sys.stderr, flush=True)  # fmt: skip
    signal.raise_signal(signal.SIGTERM)
