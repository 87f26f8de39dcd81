"""Who hears that a session closed (``Session.on_close``): a RunPanel idle on a session closed in another cell would
say "ready", Step enabled, until a click is refused. A bound method is held weakly: the session keeps no panel alive
(and the panel's list keeps no session alive); any other function is held until it is told or unsubscribed, since a
lambda or a function made inside another has no other reference to keep it (held weakly, it would never be called)."""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("rlnb")


class CloseListeners:
    """Callbacks (bound methods held weakly), called once, when the session closes."""

    def __init__(self) -> None:
        self._refs: list[Callable[[], Any]] = []  # each gives its callback, or None once a method's object is gone
        self._lock = threading.Lock()  # a close on a run's thread as a panel subscribes on the kernel's
        self._told = False  # once closed, a callback subscribed later is called at once: it would never hear

    def __len__(self) -> int:
        """The callbacks still alive and subscribed."""
        with self._lock:
            return sum(ref() is not None for ref in self._refs)

    def add(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Subscribe ``callback()`` (a bound method as long as its object lives, any other function until it is told
        or unsubscribed); returns a function that unsubscribes."""
        if not callable(callback):
            raise TypeError(f"on_close takes a function callback(), got {type(callback).__name__} {callback!r}")
        ref: Callable[[], Any] = weakref.WeakMethod(callback) if inspect.ismethod(callback) else _Held(callback)
        with self._lock:
            late = self._told
            if not late:
                self._refs = [r for r in self._refs if r() is not None] + [ref]
        if late:  # the session closed already: said now, on the caller's thread
            self._call(callback)

        def unsubscribe() -> None:
            with self._lock:
                self._refs = [r for r in self._refs if r is not ref]

        return unsubscribe

    def tell(self) -> None:
        """Call each live callback once, in the order they subscribed; one that raises is logged and the others
        still hear (a close never fails for a listener's bug)."""
        with self._lock:
            refs, self._refs, self._told = self._refs, [], True
        for ref in refs:
            callback = ref()
            if callback is not None:
                self._call(callback)

    @staticmethod
    def _call(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:  # noqa: BLE001 - the session is closed all the same
            log.exception("a session's on_close listener raised (the session is closed; the others were told)")


class _Held:
    """A callback held strongly, read as a weak reference is (``ref()``)."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]):
        self.callback = callback

    def __call__(self) -> Callable[[], None]:
        return self.callback
