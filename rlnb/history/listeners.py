"""The callbacks a history tells of each change: one that raises (a notebook's bug) must not starve the others
(a live view, a sink attached later) of what follows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("rlnb")


class Listeners(Generic[T]):
    """Callbacks called with each new item, in the order they subscribed. ``callbacks``: read it (not a call) to
    skip ``tell`` when it is empty, as a history's reports (6 Python calls a step with no listener) and table reads
    do; ``add`` changes it."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[T], None]] = []

    def __len__(self) -> int:
        """The number of callbacks subscribed."""
        return len(self.callbacks)

    def add(self, callback: Callable[[T], None]) -> Callable[[], None]:
        """Subscribe ``callback``; returns a function that unsubscribes."""
        self.callbacks.append(callback)
        return lambda: self.callbacks.remove(callback)

    def tell(self, item: T) -> None:
        """Call every listener, then raise the first one's error: one that raises (a notebook's bug, a Ctrl-C while
        it draws, a ``sys.exit()``) must not leave those after it (a live view, a sink attached later) without the
        record."""
        error: BaseException | None = None
        for cb in list(self.callbacks):
            try:
                cb(item)
            except BaseException as exc:  # noqa: BLE001 - raised once the others have heard
                error = error or exc
        if error is not None:
            raise error

    def tell_logging(self, item: T, what: str) -> None:
        """``tell``, an error logged (``what`` names the call): what was told is recorded already, and an error
        raised to the caller (``history.log``'s) would read as if it was not, to be recorded twice when run again."""
        try:
            self.tell(item)
        except Exception:  # noqa: BLE001 - a listener's bug; the caller's call succeeded
            log.exception("a %s listener raised (it is recorded; the other listeners were told)", what)
