"""A call that must refuse a named pipe, not wait on it: run where a wait fails the test instead of hanging it."""

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def refusal_in_time(call: Callable[[], object], pipe: Path, kind: type[BaseException] = OSError) -> BaseException:
    """The error (a ``kind``) that ``call`` raises, run in a thread given 30 s: one that waits on ``pipe`` fails the
    test (its other end is opened, so that the thread ends)."""
    said, _ = _in_time(call, pipe)
    assert len(said) == 1 and isinstance(said[0], kind), said
    return said[0]


def result_in_time(call: Callable[[], Any], pipe: Path) -> Any:
    """What ``call`` returns, run as ``refusal_in_time`` runs it: it must neither wait on ``pipe`` nor raise."""
    said, got = _in_time(call, pipe)
    assert not said and len(got) == 1, said
    return got[0]


def _in_time(call: Callable[[], Any], pipe: Path) -> tuple[list[BaseException], list[Any]]:
    said: list[BaseException] = []
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(call())
        except Exception as exc:  # noqa: BLE001 - said below, not in the thread
            said.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():
        other = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)  # either end: the waiting open goes on
        os.close(other)  # a reader then reads the end of the file
        worker.join(timeout=30)
        pytest.fail(f"it waited on the named pipe {pipe.name}")
    return said, got
