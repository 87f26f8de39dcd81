"""Who hears that a session closed (``Session.on_close``): a RunPanel idle on a session closed in another cell would
say "ready", Step enabled, until a click is refused. Held weakly both ways: a listener (a panel's bound method) keeps
no panel alive, and the session's list of them keeps no session alive."""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("rlnb")


class CloseListeners:
    """Callbacks, each held weakly, called once, when the session closes."""

    def __init__(self) -> None:
        self._refs: list[weakref.ref[Any]] = []
        self._lock = threading.Lock()  # a close on a run's thread as a panel subscribes on the kernel's
        self._told = False  # once closed, a callback subscribed later is called at once: it would never hear

    def __len__(self) -> int:
        """The callbacks still alive and subscribed."""
        with self._lock:
            return sum(ref() is not None for ref in self._refs)

    def add(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Subscribe ``callback()``, held weakly (a bound method as long as its object lives; keep a reference to
        any other function: a lambda given here is gone at once); returns a function that unsubscribes."""
        if not callable(callback):
            raise TypeError(f"on_close takes a function callback(), got {type(callback).__name__} {callback!r}")
        ref: weakref.ref[Any] = weakref.WeakMethod(callback) if inspect.ismethod(callback) else weakref.ref(callback)
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
