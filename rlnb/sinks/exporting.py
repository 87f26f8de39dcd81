"""A finished or reloaded run written whole to a sink (``rlnb.export``), the library called on a thread of its own so
that a library that never answers raises ``SinkError`` at a deadline instead of hanging the notebook."""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from rlnb.history import History
from rlnb.history.runconfig import is_time
from rlnb.sinks import leases, marks, stream
from rlnb.sinks.base import Failure, Point, RunInfo, Sink, SinkError, scrubbed
from rlnb.sinks.points import replay
from rlnb.sinks.process import Lease
from rlnb.sinks.stream import unnamed

EXPORT_BATCH = 1000
"""Points ``export`` gives the library at a time: each batch starts its deadline (``stream.CLOSE_TIMEOUT``) again."""


def export(run: History | str | Path, sink: Sink) -> None:
    """Write a finished or reloaded run to ``sink``: ``rlnb.export("rlnb-runs/<id>", TensorBoard("tb"))``
    or ``rlnb.export(session.history, ...)``. Raises ``SinkError`` if the sink holds this run already (streamed or
    exported before: every point twice), if the sink cannot take it, or gives no answer
    within ``stream.CLOSE_TIMEOUT`` seconds (a tracking server that accepts and never answers): the library's thread
    is then left behind, a daemon (the process still exits), and may still write part of the run there; a sink's
    child process (``process=True``) is stopped instead, unless another run still uses it."""
    if not isinstance(run, History | str | os.PathLike):
        raise TypeError(f"export takes a History or a run folder (e.g. session.history), got {type(run).__name__}")
    if not isinstance(sink, Sink):  # a list (as connect(sinks=...) takes) or a name: "... has no attribute 'error'"
        raise TypeError(f"export takes one sink, such as rlnb.sinks.TensorBoard('tb') (a list: export to each in "
                        f"turn), got {type(sink).__name__}: {sink!r}")  # fmt: skip
    history = run if isinstance(run, History) else History.load(run)
    if sink.error is not None:
        raise SinkError(f"{sink!r} cannot be used") from sink.error
    config = dict(history.config)  # a snapshot: annotate() may add a field meanwhile, on another thread
    created = config.get("created_at")  # a damaged config's (text, 10**400) is no time: now instead
    records, logged = history.records, len(history.logged)  # as replay reads them: a mark of what it sends
    points, failures = replay(history, float(created) if is_time(created) else time.time())
    info = RunInfo.from_config(config, history.path or history.loaded_from, unnamed(history))  # loaded: no store
    heard: queue.SimpleQueue[Any] = queue.SimpleQueue()
    work = (sink, info, points, failures, heard)
    threading.Thread(target=_export, args=work, name=f"rlnb-export-{type(sink).__name__}", daemon=True).start()
    timeout, doing, lease = stream.CLOSE_TIMEOUT, "setting up the sink", None
    while True:
        try:
            news = heard.get(timeout=timeout)
        except queue.Empty:
            left = ("its child process was stopped (terminated, then killed), so nothing more of this run is written "
                    "there; part of it may be" if lease is not None and lease.abandon() else "the library may still "
                    "be writing this run there, on a daemon thread left behind (it never keeps the process from "
                    "exiting)")  # fmt: skip
            raise SinkError(f"could not export run {info.name} to {sink!r}: no answer within {timeout:g} s "
                            f"(rlnb.sinks.stream.CLOSE_TIMEOUT) while {doing}; {left}") from None  # fmt: skip
        if news is None:
            marks.whole(history.path or history.loaded_from, sink, records, logged)
            return
        if isinstance(news, str):
            doing = news
            continue
        if isinstance(news, Lease):
            lease = news
            continue
        if isinstance(news, SinkError):
            raise news
        safe = scrubbed(news)  # its text, and the chained cause, without a tracking URI's password
        raise SinkError(f"could not export run {info.name} to {sink!r}: {type(safe).__name__}: {safe}") from safe


def _export(sink: Sink, info: RunInfo, points: list[Point], failures: list[Failure], heard: Any) -> None:
    """``export``'s calls to the library, on a thread of its own: each step is said on ``heard`` as it starts (the
    deadline starts again), then None once all is written, or the error."""
    try:
        lease = Lease(sink)
        heard.put(lease)  # for export to end the sink's child process, if it gives up
        try:
            lease.ready()
            heard.put(f"looking for run {info.name} there")
            where = None if lease.claim(info) else leases.HELD
            where = where or lease.holds(info)
            if where is not None:
                heard.put(SinkError(f"{sink!r} holds run {info.name} already, {where}; nothing was written (exporting "
                                    "it again wrote every point twice)"))  # fmt: skip
                return
            heard.put(f"opening run {info.name}")
            writer = lease.open(info)
            batches: list[tuple[list[Point], list[Failure]]] = [
                (points[i : i + EXPORT_BATCH], []) for i in range(0, len(points), EXPORT_BATCH)
            ] + ([([], failures)] if failures else [])
            for chunk, failed in batches:
                heard.put(f"writing steps {chunk[0].step}-{chunk[-1].step}" if chunk else "writing the failures")
                writer.write(chunk, failed)
            heard.put("closing the run")
            writer.close()
            heard.put("releasing the sink")
        finally:
            lease.release()
    except BaseException as exc:  # noqa: BLE001 - said to export, which raises it as SinkError
        heard.put(exc)
        return
    heard.put(None)
