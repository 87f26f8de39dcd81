"""The ids of what this process's creates made (``CLAIMS``): a create whose answer was lost (``recover.create_once``)
lists the matching objects made since it was sent, and those another create of this process got are not its own. A
sweep's trials create their model resources at the same moment: the lost one listed its siblings' as "matching",
failed, and told the user to stop resources the other trials were using."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar


class _Named(Protocol):
    id: str


N = TypeVar("N", bound=_Named)


class Claims:
    """The ids this process's creates were answered with (or adopted), and how many creates are in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ids: set[str] = set()
        self._sending = 0

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Around a create until its answer is claimed: a lost one's listing waits for the others in flight."""
        with self._cond:
            self._sending += 1
        try:
            yield
        finally:
            with self._cond:
                self._sending -= 1
                self._cond.notify_all()

    def claim(self, made_id: str) -> None:
        with self._cond:
            self._ids.add(made_id)

    def split(self, found: list[N], until: float) -> tuple[list[N], list[N]]:
        """``found`` as (no create of this process got it, another create of it did). Where more than one is left,
        first waits (until ``until``, ``time.monotonic()``) for the creates still in flight: a sibling's answer may
        be on its way."""
        with self._cond:
            if len([f for f in found if f.id not in self._ids]) > 1:
                self._cond.wait_for(lambda: self._sending == 0, timeout=max(0.0, until - time.monotonic()))
            return [f for f in found if f.id not in self._ids], [f for f in found if f.id in self._ids]


CLAIMS = Claims()
"""This process's: every client's creates (a sweep's trials each have their own client)."""
