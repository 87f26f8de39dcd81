"""rlnb's own background threads, whose end a Ctrl-C cannot hide.

CPython before 3.13 (bpo-45274): a ``KeyboardInterrupt`` landing in ``Thread.join()`` while the thread runs marks
it stopped, so ``is_alive()`` is False and every later ``join`` returns at once while it still runs. rlnb waits
for its threads on the main thread, where a Ctrl-C lands (a session's close, the exit's steps): a second close
then returned with operations RUNNING, and the exit went on under a torch op (SIGABRT, records PENDING). So each
of these threads sets an Event as it ends, and ``join`` waits on that, which a Ctrl-C leaves intact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Thread(threading.Thread):
    """A thread whose ``join`` waits on ``ended`` (set as ``target`` returns or raises), never on
    ``Thread.join``'s lock."""

    def __init__(self, target: Callable[..., object], name: str, args: tuple[Any, ...] = (), daemon: bool = True):
        super().__init__(target=target, name=name, args=args, daemon=daemon)
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.ended.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the thread ended, at most ``timeout`` seconds (None: no limit); ``is_alive()`` says which."""
        if self.ident is None:
            raise RuntimeError("cannot join thread before it is started")
        if self is threading.current_thread():
            raise RuntimeError("cannot join current thread")
        self.ended.wait(timeout)

    def is_alive(self) -> bool:
        return super().is_alive() and not self.ended.is_set()


def join_all(threads: list[Thread], timeout: float) -> list[Thread]:
    """Wait for ``threads`` to end, at most ``timeout`` seconds in all; those still running then."""
    end = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    return [thread for thread in threads if thread.is_alive()]
