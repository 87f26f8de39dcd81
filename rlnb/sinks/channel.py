"""One run of one sink streamed (``rlnb.sinks.stream``): a queue, and a daemon thread that opens the library's run at
the first point and writes a batch every ``sink.interval`` seconds. After each batch it records in the run folder how
far it wrote (``rlnb.sinks.marks``), so that a session continuing the run after its process was killed sends the sink
what it missed, and nothing twice.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any

from rlnb.history import History
from rlnb.lifecycle import shutdown, threads
from rlnb.sinks import leases, marks
from rlnb.sinks.base import Failure, Point, RunInfo, Sink, Writer
from rlnb.sinks.left_out import left_out
from rlnb.sinks.marks import Mark
from rlnb.sinks.points import Item, merge
from rlnb.sinks.process import Lease, place

MAX_BACKLOG = 100_000
"""Points a sink may fall behind before it is dropped (it cannot keep up with the run)."""
RECHECK = 0.5
"""Seconds between two looks at a library's store while it holds less than it was given (``Writer.stored``)."""
_CLOSE = object()


class Channel:
    """One run of one sink: a queue and a daemon thread that writes it in batches."""

    def __init__(self, sink: Sink, history: History, unnamed: str, fresh: bool):
        self.sink = sink
        self._history = history
        self._unnamed = unnamed
        self._fresh = fresh  # a new run, not one a later session continues: the sink must not hold it yet
        self._left_out = False
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closing = threading.Event()
        self.settled = threading.Event()
        """Set once the writer ended, or this run is said left out of its dropped sink (its own failure, or another
        run's): what a close waits for, never the library's own close after a failure, which may hang once its server
        is gone, nor a write hung when the run fell too far behind it (``put``)."""
        self.run_name = str(history.config.get("run_id", ""))
        file = marks.path(history.path, sink) if history.path is not None else None
        self.marked = marks.MarkFile(file) if file is not None else None  # how far it wrote the run
        self._unstored: deque[tuple[int, Mark]] = deque()  # marks of rows the library has not stored yet
        self.thread = threads.Thread(target=self._run, name=f"rlnb-sink-{type(sink).__name__}")
        self.thread.start()

    def put(self, items: list[Item | Mark], backlog: float = MAX_BACKLOG) -> None:
        """Queue what one hook made: a point or failures, then the mark that says what the sink holds once it wrote
        them (``resend``: a killed session's unwritten points, never too many at once)."""
        if self.sink.error is not None or self._left_out:
            return
        if self._queue.qsize() >= backlog:
            self.fail(RuntimeError(f"fell {MAX_BACKLOG} points behind the run"))
            return
        self._queue.put(items)

    def fail(self, exc: BaseException) -> None:
        """Drop the sink for this run's failure outside its thread (a hook's error, a backlog): said by the sink's
        warning, so settled; the writer, perhaps hung in the library, stops at its next batch. A sink another run's
        failure dropped first stays unsettled: its writer says this run left out."""
        self.sink.fail(exc, self.run_name)
        if self.sink.dropped_in == self.run_name:
            self.settled.set()

    def close(self) -> None:
        """Tell the writer to finish the run, once: a close a Ctrl-C cut short tells again those it had not told."""
        if not self._closing.is_set():
            self._queue.put(_CLOSE)
            self._closing.set()

    def _run(self) -> None:
        lease: Lease | None = None
        writer: Writer | None = None
        try:
            lease = Lease(self.sink)
            lease.ready()
            while True:
                try:
                    batch = [self._queue.get(timeout=RECHECK if self._unstored else None)]
                except queue.Empty:
                    self._mark(writer, None)
                    continue
                if batch[0] is not _CLOSE:
                    self._closing.wait(self.sink.interval)
                while batch[-1] is not _CLOSE:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if self.sink.error is not None:  # dropped while writing another run
                    self._dropped_elsewhere()
                    _quietly_close(writer)
                    return
                if writer is None:  # a snapshot of the config: annotate() may add a field meanwhile, on another thread
                    run = RunInfo.from_config(dict(self._history.config), self._history.path, self._unnamed)
                    run.continued = not self._fresh
                    self.run_name = run.name
                    if self._held(lease, run):
                        return
                    writer = lease.open(run)
                    shutdown.run_first()
                items = [i for group in batch if group is not _CLOSE for i in group]
                points, failures = merge(i for i in items if isinstance(i, Point | Failure))
                if points or failures:
                    writer.write(points, failures)
                self._mark(writer, next((i for i in reversed(items) if isinstance(i, Mark)), None))
                if batch[-1] is _CLOSE:
                    writer.close()
                    if self._unstored and self.marked is not None:  # the run finished: its store holds it all
                        self.marked.write(self._unstored[-1][1])
                    return
        except BaseException as exc:  # noqa: BLE001 - any error drops the sink, never the run
            self.sink.fail(exc, self.run_name)  # a no-op where another run's failure dropped it first
            self._dropped_elsewhere()
            _quietly_close(writer)
        finally:
            try:
                if lease is not None:
                    lease.release()
                if self.marked is not None:
                    self.marked.close()
            finally:  # last: a close that returned left the sink's place free for the next session
                self.settled.set()

    def _dropped_elsewhere(self) -> None:
        """This run left out of a sink another run's failure dropped meanwhile (a sweep's trials at once): said as a
        later run given the dropped sink is (``left_out``): the sink's own warning names the other run only. Asked
        after this run's own ``fail``, which sets who dropped it once: two runs failing at once are each said."""
        if self.sink.error is not None and self.sink.dropped_in != self.run_name:
            left_out(self._history, self.sink, self._unnamed)
        self.settled.set()

    def _mark(self, writer: Writer | None, mark: Mark | None) -> None:
        """Record ``mark`` once the library's store holds what the writer gave it until then (``Writer.stored``): W&B
        and Trackio take rows in memory and store them later, so a mark written when their ``log()`` returned said
        "written" of rows a ``kill -9`` then lost, and no later session sent them again."""
        if self.marked is None:
            return
        stored = getattr(writer, "stored", None)
        counts = stored() if stored is not None else None
        if counts is None:  # the library stores what it takes
            if mark is not None:
                self.marked.write(mark)
            return
        given, held = counts
        if mark is not None:
            self._unstored.append((given, mark))
        ready = None
        while self._unstored and self._unstored[0][0] <= held:
            ready = self._unstored.popleft()[1]
        if ready is not None:
            self.marked.write(ready)

    def _held(self, lease: Lease, run: RunInfo) -> bool:
        """Whether another run of this name is being written to the sink's place now (``Lease.claim``: two sessions
        of this machine with one run id), or, for a new run, the sink holds one already (``Sink.holds``: a run folder
        deleted and its id used again, another runs folder): this run is then left out there, with a warning,
        instead of being mixed into that one (a TensorBoard folder showing both runs' steps as one). An earlier
        session of this very run still writing there (its close gave up on a slow library) leaves this session out,
        and its mark stays: a later session continuing the run sends the sink what this one recorded."""
        where = None if lease.claim(run) else leases.HELD
        where = where or (lease.holds(run) if self._fresh else None)
        if where is None:
            return False
        self._left_out = True
        kept = self._history.path or "session.history, in memory"
        name = f"rlnb.sinks.{type(self.sink).__name__}"
        if where is leases.HELD and (me := leases.owner(run)) and leases.holder(place(self.sink) or "", run.name) == me:
            self.sink.note(f"{name} left this session of run {run.name} out: the run is still being written there by "
                           "an earlier session of this run (its close gave up waiting); written there too, the two "
                           f"sessions' steps would be mixed. {kept} has everything, and a later session continuing "
                           "the run sends the sink what this one recorded")  # fmt: skip
            return True
        if self.marked is not None:  # a later session continuing the run sends it nothing of this one either
            self.marked.remove()
        self.sink.note(f"{name} left run {run.name} out: it holds another run of that name, {where}; written there "
                       f"too, the two would be mixed. {kept} has everything: rlnb.export writes it there once the "
                       "other is removed")  # fmt: skip
        return True


def _quietly_close(writer: Writer | None) -> None:
    """Best effort after a failure (the warning has been given): finish the library's run."""
    if writer is not None:
        try:
            writer.close()
        except Exception:  # noqa: BLE001
            return
