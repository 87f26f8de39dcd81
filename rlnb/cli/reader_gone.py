"""``URL=$(rlnb serve | head -1)``: the server stops when the reader of its output leaves while it serves.

After its two start lines the server writes nothing to stdout, so no write raises ``BrokenPipeError`` and the
pipeline would never end. A pipe's write end whose last reader closed reports ``POLLERR`` (``POLLHUP`` for some kinds):
a thread blocked in ``poll`` on it, which costs nothing while the reader stays, raises SIGTERM then, and the server
stops on its main thread as ``kill`` would stop it (its operations finished or abandoned, its temporary checkpoints
removed), exiting 141 as the stop at a write does.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import threading

STDOUT = 1
GONE = select.POLLERR | select.POLLHUP if hasattr(select, "poll") else 0


class ReaderWatch:
    """Watches ``fd`` (a pipe or FIFO; anything else, or no ``poll``, is left alone) until ``close``. ``gone`` is set
    when its reader left, just before SIGTERM is raised."""

    def __init__(self, fd: int = STDOUT) -> None:
        self.gone = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None
        try:
            piped = stat.S_ISFIFO(os.fstat(fd).st_mode)
        except OSError:  # closed: ``output.opened`` made it the null device, which no reader leaves
            piped = False
        if piped and GONE:
            self._thread = threading.Thread(target=self._watch, args=(fd,), name="rlnb-reader-gone", daemon=True)

    def start(self) -> None:
        """Start watching, where a SIGTERM raised at once is handled as a stop (not a bare ``SystemExit``)."""
        if self._thread is not None:
            self._wake_read, self._wake_write = os.pipe()  # closed by ``close``: the thread's poll returns
            self._thread.start()

    def _watch(self, fd: int) -> None:
        poll = select.poll()
        poll.register(fd, 0)  # no event asked for: POLLERR and POLLHUP are reported all the same
        poll.register(self._wake_read, select.POLLIN)
        try:
            events = dict(poll.poll())  # no timeout: the reader leaves or ``close`` wakes it
        finally:
            os.close(self._wake_read)
        with self._lock:
            if events.get(fd, 0) & GONE and not self._closed:
                self.gone.set()
                signal.raise_signal(signal.SIGTERM)  # handled on the main thread: the server's own stop

    def close(self, deadline: float = 5.0) -> None:
        """Stop watching (the server has stopped), the thread gone within ``deadline`` seconds (it wakes at once)."""
        with self._lock:
            if self._thread is None or self._thread.ident is None or self._closed:  # never started, or closed
                return
            self._closed = True
            os.close(self._wake_write)
        self._thread.join(deadline)
