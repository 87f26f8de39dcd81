"""A History streamed to sinks while it runs (``attach``); ``rlnb.sinks.exporting`` writes one whole afterwards.

The History's hooks run on the backend's threads and the notebook's, so they do O(1) work under one
lock: a step's point is made from its finished records (``rlnb.sinks.points``) and queued. Each sink
gets one daemon thread per run, which opens the library's run at the first point and writes a
batch every ``sink.interval`` seconds, so a slow library never blocks training. ``close()``
flushes within a deadline; an ``atexit`` hook closes whatever is still attached, so that an
interpreter exiting without ``session.close()`` loses nothing and never hangs. After each batch the sink's thread
records in the run folder how far it wrote (``rlnb.sinks.marks``): a session continuing the run after a process
killed with points queued sends each sink what it missed.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from rlnb.history import History, Record, new_run_id
from rlnb.history.runconfig import session_starts
from rlnb.lifecycle import shutdown
from rlnb.sinks import marks
from rlnb.sinks.base import Sink, SinkWarning, say_all
from rlnb.sinks.channel import Channel
from rlnb.sinks.left_out import left_out
from rlnb.sinks.marks import Mark
from rlnb.sinks.points import Item, Row, Steps, logged, unsent
from rlnb.sinks.process import place, stop_all

CLOSE_TIMEOUT = 30.0
"""Seconds ``close()`` waits for the sinks to write what they hold before giving up on them."""
EXIT_TIMEOUT = 30.0
"""Seconds, over all sinks, that interpreter exit waits for runs nobody closed (MLflow's child
may still be starting: importing MLflow and creating a new store's tables take seconds). A sink's
child process still busy then is killed."""


class Attachment:
    """A History streaming to sinks. ``close()`` flushes them (``Session.close`` calls it)."""

    def __init__(self, history: History, sinks: Sequence[Sink]):
        self._history = history
        starts = session_starts(dict(history.config))
        self._steps = Steps(starts)  # its earlier sessions' steps, as History.steps
        self._session = len(starts)  # this session's number: its logged rows' (``points.merge``)
        self._lock = threading.Lock()
        self._closed = False
        self._waited = False  # the close's wait ended (not cut short by a Ctrl-C)
        self._unheard: list[str] = []  # the sinks that finished their runs at close(), told of later figures
        for sink in sinks:
            if sink.error is not None:
                left_out(history, sink, unnamed(history))
        if threading.current_thread() is threading.main_thread():  # a sweep's trial thread: another's catch_warnings
            say_all()  # a new run: a sink's failure not said yet (after the last log of a run never closed) is said
        fresh = not session_starts(dict(history.config)) and history not in _LATEST  # no session streamed it before
        self._channels = [Channel(s, history, unnamed(history), fresh) for s in sinks if s.error is None]
        with self._lock:  # a record that finishes meanwhile is heard once its state is taken in: seen once
            self._unsubscribe = [history.on_record(self._on_record), history.on_log(self._on_log)]
            records, rows = history.records, history.logged_rows()
            self._steps.seed(records)  # attached mid-step: the step's operations so far count in it
            self._logged = len(rows)  # history.log rows taken in: a mark's count
            for channel in self._channels:
                self._resume(channel, records, rows)
        self._unread = history.on_read(self._on_read)  # kept after close() while a writer that missed it may fail
        _ATTACHED.add(self)
        _LATEST[history] = weakref.ref(self)  # a weak value: a strong one would keep the history alive for ever

    def _resume(self, channel: Channel, records: list[Record], rows: list[Row]) -> None:
        """Queue for ``channel`` what its sink missed of this run by its mark in the run folder (``rlnb.sinks.marks``:
        a session killed with points queued); a sink without a mark (it never streamed this run) gets one now and the
        steps from now on."""
        if channel.marked is None:
            return
        now, sent = self._steps.mark(self._logged), None
        try:
            sent = channel.marked.read()
        except ValueError as exc:
            channel.sink.note(f"rlnb.sinks.{type(channel.sink).__name__} cannot tell how far it wrote run "
                              f"{channel.run_name} in earlier sessions: {exc}; steps a killed session left "
                              "unwritten there are not sent (rlnb.export writes the whole run once it is deleted "
                              "there)")  # fmt: skip
        missed = unsent(records, session_starts(dict(self._history.config)), rows, sent) if sent else []
        if missed:
            channel.put([*missed, now], backlog=math.inf)
        else:
            marks.write_once(channel.marked.file, now)  # the sink's thread keeps its own open

    def _on_record(self, rec: Record) -> None:
        try:
            with self._lock:
                if not self._closed and (items := self._steps.record(rec)):
                    self._send([*items, self._steps.mark(self._logged)])
        except Exception as exc:  # noqa: BLE001 - a hook must never raise into the backend
            self._broken(exc)

    def _on_log(self, row: dict[str, Any]) -> None:
        try:
            with self._lock:
                if not self._closed:
                    self._logged += 1
                    self._send([logged(row, time.time(), self._session), self._steps.mark(self._logged)])
        except Exception as exc:  # noqa: BLE001 - nor into history.log
            self._broken(exc)
        self._say()  # at the user's log call

    def _on_read(self, _: None) -> None:
        """A failure after the last ``log``, in a notebook that never closes (nor logs again), is said when the user
        next reads the history's tables (a plot, ``steps``): on the notebook's thread only, never a live view's."""
        if threading.current_thread() is threading.main_thread():
            self._say()

    def _say(self) -> None:
        """Say each sink's failure (``Sink.say``) on this thread, the one that logs or closes."""
        for channel in self._channels:
            channel.sink.say()

    def _logged_after_close(self, row: dict[str, Any]) -> None:
        """A figure logged once the sinks finished their runs (an evaluation after the ``with`` block) reaches the run
        folder alone: said once, not missing from the sinks silently. A later session given this history
        (``history=``) with sinks of its own sends them the figure: nothing is said here then."""
        with self._lock:
            if not self._unheard:
                return
            unheard, self._unheard = self._unheard, []
            self._unsubscribe.pop()()
            latest = _LATEST.get(self._history)
            if latest is None or latest() is not self:  # a later session streams it (or says this itself)
                return
        names = ", ".join(k for k in row if k != "step")[:200]
        kept = "the rlnb run folder" if self._history.path is not None else "session.history, in memory,"
        warnings.warn(
            f"{names} logged at step {row['step']} after close(): rlnb.sinks {', '.join(unheard)} finished this run "
            f"at close(), so it reaches {kept} only (and so do later figures). Log figures before close(); "
            "rlnb.export(history, sink) writes the whole run to a sink",
            SinkWarning,
            stacklevel=5,  # the user's log call, through Listeners.tell_logging and tell
        )

    def _broken(self, exc: Exception) -> None:
        for channel in self._channels:
            channel.fail(exc)

    def _send(self, items: list[Item | Mark]) -> None:
        for channel in self._channels:
            channel.put(items)

    def close(self, timeout: float | None = None) -> None:
        """Write what is pending and finish every sink's run; a sink still busy after ``timeout``
        seconds (default ``CLOSE_TIMEOUT``) is left behind with a warning (its thread is a daemon:
        it never blocks exit)."""
        timeout = CLOSE_TIMEOUT if timeout is None else timeout
        with self._lock:
            if self._waited:
                return
            if not self._closed:  # a close whose wait a Ctrl-C ended: the next close (or the exit's) waits again
                self._closed = True
                for unsubscribe in self._unsubscribe:
                    unsubscribe()
                self._send([*self._steps.drain(), self._steps.mark(self._logged)])
                self._unheard = [type(c.sink).__name__ for c in self._channels if c.sink.error is None]
                if self._unheard:
                    self._unsubscribe = [self._history.on_log(self._logged_after_close)]
            for channel in self._channels:  # each close: those a Ctrl-C above kept from being told are told now
                channel.close()
        deadline = time.monotonic() + timeout
        if shutdown.exiting():  # a flush that does not end at once is said: a silent 30 s reads as a hang
            busy = [c for c in self._channels if c.sink.error is None and not c.sink.is_stalled()]
            if not all(channel.settled.wait(shutdown.CHUNK) for channel in busy):
                names = ", ".join(type(channel.sink).__name__ for channel in busy)
                shutdown.say_waiting(f"flushing rlnb.sinks {names} of run {busy[0].run_name}", timeout)
        path = self._history.path  # record=False: no run store to point to, only the history in memory
        kept = f"its run folder {path} has everything" if path else "session.history has everything, in memory only"
        for channel in self._channels:
            if channel.sink.error is None and channel.sink.is_stalled():  # still busy with a run that missed an
                continue  # earlier close's deadline: never waited for again
            # settled: the run written, or said left out of its dropped sink (a writer in flight when another run's
            # failure dropped it says so: in a sweep, at its end, not at exit); never the library's own close after
            # a failure, in close()'s own batch too, which may hang once its server is gone
            if channel.settled.wait(max(0.0, deadline - time.monotonic())) or channel.sink.error is not None:
                continue
            said = (f"rlnb.sinks.{type(channel.sink).__name__} did not finish writing within {round(timeout, 1):g} s; "
                    f"what it had not written yet may be missing there ({kept}); no close waits for it again "
                    "while it is still writing")  # fmt: skip
            channel.sink.stall(channel.thread, said)
        self._waited = True
        _ATTACHED.discard(self)
        if all(channel.settled.is_set() for channel in self._channels):
            self._unread()  # every run written or said: nothing left to say at a read (a history reused by many)
        self._say()


def validate(sinks: Sink | Sequence[Sink]) -> list[Sink]:
    """``sinks`` as a list, or a ``TypeError`` naming what is not a sink (before anything starts)."""
    if isinstance(sinks, str | bytes) or not isinstance(sinks, Sink | Iterable):
        raise TypeError(
            "sinks must be a sink or a list of sink objects (rlnb.sinks.TensorBoard(...), MLflow(...), WandB(...), "
            f"Trackio(...)), got {type(sinks).__name__}: {sinks!r}"
        )
    listed = [sinks] if isinstance(sinks, Sink) else list(sinks)
    for i, sink in enumerate(listed):
        if not isinstance(sink, Sink):
            raise TypeError(f"sinks must be rlnb.sinks objects (TensorBoard, MLflow, WandB, Trackio), got {sink!r}")
        first = next(j for j, other in enumerate(listed) if other is sink)
        if first < i:  # two writers of one run into one library: every point twice (two TensorBoard event files)
            raise ValueError(f"sinks[{i}] is sinks[{first}] ({sink!r}): the same sink twice would write every point "
                             "of the run twice; give it once")  # fmt: skip
        same = next((j for j, other in enumerate(listed[:i]) if place(other) == place(sink) is not None), None)
        if same is not None:  # two objects, one place: the same, one run of one name written there twice
            raise ValueError(f"sinks[{i}] writes where sinks[{same}] does ({place(sink)}): two sinks of one place "
                             "would write every point of the run twice; give one")  # fmt: skip
    return listed


def attach(history: History, sinks: Sink | Sequence[Sink]) -> Attachment:
    """Stream ``history`` to ``sinks`` from now on (the steps finished before are not sent, but those a sink of this
    place was given and had not written, by its mark in the run folder; the one under way counts its operations from
    before)."""
    return Attachment(history, validate(sinks))


def unnamed(history: History) -> str:
    """The name of a run without an id (``record=False``) in every sink, streamed or exported: one per history (an
    export after the stream wrote a second run, under a fresh name)."""
    return _UNNAMED.setdefault(history, new_run_id())


_ATTACHED: set[Attachment] = set()
_LATEST: weakref.WeakKeyDictionary[History, weakref.ref[Attachment]] = weakref.WeakKeyDictionary()
"""Each history's latest attachment: the one that says a figure logged after its close() reached no sink."""
_UNNAMED: weakref.WeakKeyDictionary[History, str] = weakref.WeakKeyDictionary()


def _close_all() -> None:
    """At exit, after the sessions have closed (``rlnb.lifecycle.shutdown``: what was in flight is recorded FAILED and
    sent as failures), flush every attachment still open within one deadline."""
    deadline = time.monotonic() + EXIT_TIMEOUT
    for attachment in list(_ATTACHED):
        try:
            attachment.close(timeout=max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:  # a Ctrl-C here abandons the flush: what is left waits no more
            shutdown.interrupted()
            deadline = time.monotonic()
    stop_all(timeout=max(0.0, deadline - time.monotonic()))
    say_all()  # at the latest: a failure no log, close or read has said since (a writer that failed after its close)


shutdown.on_exit("sinks", _close_all)
