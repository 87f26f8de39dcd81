"""Running one scenario on the in-process engine (the built-in ``tiny`` model) and on ``FakeBackend``, and what a
caller sees of each: the fidelity tests (``tests/testing/``) compare the two."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import rlnb
from rlnb import wire
from rlnb.engine.backend import LocalBackend
from rlnb.testing import FakeBackend

BACKENDS = ["engine", "fake"]
FAKE_ONLY = ("loss", "grad_norm")
"""``session``'s options that only the fake takes (the engine's loss and norm come from its model)."""


def session(kind: str, optimizer: str = "adam", **options: Any) -> rlnb.Session:
    """An unrecorded session on the engine (``LocalBackend(optimizer, "tiny", seed=0)``) or on the fake."""
    fake = {k: options.pop(k) for k in FAKE_ONLY if k in options}
    if kind == "engine":
        return rlnb.Session(LocalBackend(optimizer, "tiny", seed=0, **options), record=False)
    return rlnb.Session(FakeBackend(optimizer, **options, **fake), record=False)


def seen(op: Any) -> tuple:
    """What a caller sees of a finished operation: COMPLETED and its result, or FAILED, its code and its words."""
    try:
        return ("COMPLETED", op.result(30))
    except rlnb.OperationFailed as failed:
        return ("FAILED", failed.code, str(failed).split(f"{failed.code}: ", 1)[1])


def both(scenario: Callable[[rlnb.Session], Any], **options: Any) -> list:
    """``scenario(session)`` on the engine, then on the fake; each session closed after."""
    out = []
    for kind in BACKENDS:
        s = session(kind, **options)
        try:
            out.append(scenario(s))
        finally:
            s.close()
    return out


def submitted(s: rlnb.Session, kind: wire.OperationKind, body: Any) -> tuple:
    """A body sent to the backend as it is (built by hand, past the ``Session``'s checks): how its operation ended."""
    done, last = threading.Event(), []

    def told(env: Any) -> None:
        last[:] = [env]
        if env.status in (wire.OperationStatus.COMPLETED, wire.OperationStatus.FAILED):
            done.set()

    s.backend.submit(kind, body, told)
    assert done.wait(30)
    env = last[0]
    return env.status, env.error.code if env.error else None, env.error.message if env.error else None
