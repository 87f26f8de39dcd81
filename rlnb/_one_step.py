"""One step's operations, sent whole or not at all: ``rl_step`` submits its forward-backwards, optim-step and
weights-sync inside ``one_step()``. A backend that sends them later (a remote session's sender thread) sends none of
the rest once one of them is refused at its POST, and fails them with its code: an optim-step behind a refused
forward-backward would apply a part of the batch's gradients (or none), and still count a step."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_STEP: contextvars.ContextVar[object | None] = contextvars.ContextVar("rlnb_one_step", default=None)


@contextlib.contextmanager
def one_step() -> Iterator[None]:
    """The operations this thread submits inside are one step's (``current``)."""
    token = _STEP.set(object())
    try:
        yield
    finally:
        _STEP.reset(token)


def current() -> object | None:
    """The step whose operations this thread is submitting (compared by identity), or None outside ``one_step``."""
    return _STEP.get()
