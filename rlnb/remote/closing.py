"""What ``RemoteBackend.close`` does once the session's stop was asked: the last polls of what is still in flight
(``settle``), a stop that found its target gone already (``gone``), and the warning that names what may still run,
and cost, remotely when a stop failed (``warn_running``)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from rlnb import wire
from rlnb.errors import APIConnectionError, APIError, APIStatusError
from rlnb.lifecycle import shutdown, threads
from rlnb.remote.client import APIClient
from rlnb.remote.poller import report

log = logging.getLogger("rlnb")

SETTLE_POLLS = 8
"""The last polls of ``close()`` that go at once (``settle``)."""


def settle(client: APIClient, session_id: str, inflight: list[Any], ask: bool) -> None:
    """After the stop: one last poll of each operation still in flight (while the server answers, if
    ``ask``); unfinished ones end FAILED (SESSION_NOT_ACTIVE), as on the local backend. The polls share one
    call's ``deadline`` (a server answering each 503 with a ``Retry-After`` held close() one per operation), and go
    ``SETTLE_POLLS`` at a time: one after another, 30 operations on a server answering in 1 s held close() 31 s
    (at the interpreter's exit, where no future can be scheduled, they still go one after another). A SIGTERM during
    the exit (``shutdown.hurried``) ends the wait: what is unanswered then ends FAILED, its outcome unknown. Reported in
    submission order."""
    end, unreachable = time.monotonic() + client.deadline, threading.Event()
    found: list[tuple[wire.Operation[Any], bool] | None] = [None] * len(inflight)

    def last(indices: Iterable[int]) -> None:
        """Their last envelopes, and whether the server was reached for each."""
        for i in indices:
            op = inflight[i]
            if not ask or unreachable.is_set() or shutdown.hurried():
                found[i] = op.env, False
                continue
            try:
                found[i] = client.get_operation(session_id, op.kind, op.env.id, until=end), True
            except APIConnectionError:
                unreachable.set()  # do not spend a deadline on each of the others
                found[i] = op.env, False
            except APIError:
                found[i] = op.env, True

    pool = ThreadPoolExecutor(SETTLE_POLLS, thread_name_prefix=f"rlnb-settle-{session_id}")
    try:  # a SIGTERM at exit (a kernel's Shut Down: SIGKILL 2.5 s later) stops the wait: the rest is unknown
        futures = [pool.submit(last, [i]) for i in range(len(inflight))]
        shutdown.wait(lambda seconds: not wait(futures, seconds).not_done, math.inf)  # each poll ends by ``end``
    except RuntimeError:  # the interpreter's exit: no future can be scheduled, so one after another on one thread
        polls = threads.Thread(target=last, args=(range(len(inflight)),), name=f"rlnb-settle-{session_id}")
        polls.start()
        shutdown.join(polls, math.inf)
    finally:  # a Ctrl-C: close() returns now; the polls end by their deadline
        pool.shutdown(wait=False, cancel_futures=True)
    hurried = shutdown.hurried()
    envs = [(op.env, False) if got is None else got for op, got in zip(inflight, found, strict=True)]
    for op, (env, reached) in zip(inflight, envs, strict=True):
        if env.status not in wire.TERMINAL_STATUSES:
            reason = "the session was closed before this finished"
            if not reached:
                why = "the exit was hurried (SIGTERM, Ctrl-C)" if hurried else "the server could not be reached"
                reason += f" ({why}, so its outcome is unknown)"
            env = wire.Operation.failed(op.env.id, wire.OperationErrorCode.SESSION_NOT_ACTIVE, reason)
        report(op, env)


def gone(exc: APIError, what: str) -> bool:
    """Whether a stop's error says ``what`` is gone already (404: the server forgot it, e.g. it expired): stopped,
    so closing succeeds, with a warning. Raised, it hid the error of the ``with`` block that was closing it."""
    if not (isinstance(exc, APIStatusError) and exc.status_code == 404):
        return False
    log.warning("rlnb: %s was already gone when rlnb stopped it (%s)", what, exc)
    return True


def warn_running(client: APIClient, exc: APIError, what: str, how: str) -> None:
    """Say what may still run (and cost) remotely when its stop failed, and how to stop it later (``how``: the
    ``APIClient`` call): in a warning, and in a note on ``exc``, so that whoever keeps the error (a sweep's row,
    lr_find's result) keeps what is left running with it."""
    log.warning("rlnb: could not stop %s at %s (%s): it may still be running remotely; stop it once the server "
                "answers, e.g. rlnb.remote.client.APIClient(%r).%s", what, client.base_url, exc,
                client.base_url, how)  # fmt: skip
    exc.add_note(f"{what} may still be running remotely: stop it once the server answers, e.g. "
                 f"rlnb.remote.client.APIClient({client.base_url!r}).{how}")  # fmt: skip
