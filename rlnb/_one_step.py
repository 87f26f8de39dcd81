"""One step's operations, sent whole or not at all: ``rl_step`` submits its forward-backwards, optim-step and
weights-sync inside ``one_step()``. A backend that sends them later (a remote session's sender thread) sends none of
the rest once one of them is refused at its POST, and the local engine's worker runs none of the rest once one of them
FAILED; both fail them with its code: an optim-step behind a failed forward-backward would apply a part of the batch's
gradients (or none), and still count a step. ``rlnb serve`` runs each POST as it comes: there the marker stays on the
client, which cannot stop an optim-step the server already queued."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

STEP: contextvars.ContextVar[object | None] = contextvars.ContextVar("rlnb_one_step", default=None)
"""The step whose operations this thread is submitting (compared by identity), or None outside ``one_step``: each
backend reads ``STEP.get()`` per submission, a C call (no wrapper: a Python call an operation,
``tests/engine/test_step_calls.py``)."""


@contextlib.contextmanager
def one_step() -> Iterator[None]:
    """The operations this thread submits inside are one step's (``STEP``)."""
    token = STEP.set(object())
    try:
        yield
    finally:
        STEP.reset(token)


def rest_failed(kind: str, why: str, *, sent: bool) -> str:
    """What each later operation of a step says when its ``kind`` before it failed (``sent``) or was not sent."""
    if sent:
        return f"not run: this step's {kind} before it failed, nor is the rest of the step ({why})"
    return f"not sent: this step's {kind} before it was not sent, nor is the rest of the step ({why})"
