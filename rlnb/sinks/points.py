"""The points and failures a sink receives, made from a History's records as ``History.steps`` does.

One point per completed optim-step: the loss summed over the forward-backwards submitted since the
optim-step before (in submission order; a failed one ends its step too, unless it kept the gradients), the
pre-clip grad norm(s), the clip threshold, the learning rate and the step's compute time and wait
(``rlnb.history.timing``); ``history.log`` rows are points of their own, merged into their step's. Figures that
are NaN (not reported) are left out. A failed operation of any kind is a ``Failure``.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable
from typing import Any

from rlnb.history import History, Record
from rlnb.history.figures import SHADOWED, STEP_COLUMNS
from rlnb.history.runconfig import SessionStart, session_starts
from rlnb.history.steplog import KEPT_GRADIENTS
from rlnb.history.timing import Times, op_times, step_times
from rlnb.sinks.base import Failure, Point
from rlnb.sinks.marks import MAX_BEYOND, Mark
from rlnb.text.prompts import escaped
from rlnb.wire import TERMINAL_STATUSES, OperationKind, OperationStatus

TRAINING = frozenset({OperationKind.FORWARD_BACKWARD, OperationKind.OPTIM_STEP})
STEP_FIELDS = ("grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate")
Item = Point | Failure
Row = tuple[dict[str, Any], int | None]
"""A ``history.log`` row and the session of the run that logged it (``History.logged_rows``)."""


class Steps:
    """Points and failures from finished records. A step's point waits until every operation
    submitted before it has finished, so the loss and the step times match ``History.steps`` even
    when a remote backend notices completions out of order."""

    def __init__(self, sessions: Iterable[SessionStart] = ()) -> None:
        """``sessions``: where later sessions continued the run (``runconfig.session_starts`` of its config): each
        one's first operation starts a step, as in ``History.steps``."""
        self._starts = list(sessions)
        self._session = 0  # of the records given their items: the starts passed
        self._running: set[int] = set()
        self._ready: list[tuple[int, Record]] = []  # a heap by seq
        self._loss = math.nan  # of the training forward-backwards since the last optim-step (a failed one too)
        self._times: list[Times] = []  # of the operations since the last optim-step
        self._seeded: set[int] = set()  # the records ``seed`` took finished
        self._done = -1  # every record up to it has given its items (``mark``)
        self._beyond: set[int] = set()  # and these past it

    def seed(self, records: Iterable[Record], sent: Mark | None = None) -> list[Item]:
        """Take in the records a History holds before a sink is attached to it mid-run, sending none of them: else
        the step under way would have its loss (and times) from the operations since only, a half of it (a
        forward-backward before and one after: the sink's loss would be half of ``History.steps``'). A record seen
        finished here is not taken again when its hook comes after (it finished as the sink subscribed). An
        unfinished record of an earlier session (its process died mid-operation) never finishes: it is not waited
        for, or every later point would wait until ``close()``. With ``sent`` (how far a sink wrote the run,
        ``rlnb.sinks.marks``), the items of the records it does not hold are returned, to be sent to it: those a
        killed session queued and its sink never wrote."""
        latest = self._starts[-1] if self._starts else None
        records = list(records)
        out: list[Item] = []
        for rec in records:
            if rec.status in TERMINAL_STATUSES:
                self._seeded.add(rec.seq)
                heapq.heappush(self._ready, (rec.seq, rec))
                if sent is not None and not sent.holds(rec.seq) and rec.kind not in TRAINING:
                    out += [failure(rec)] if rec.status == OperationStatus.FAILED else []  # as ``record`` says it
            elif latest is None or latest.begins(rec):
                self._running.add(rec.seq)
        before = min(self._running, default=math.inf)
        while self._ready and self._ready[0][0] < before:
            seq, rec = heapq.heappop(self._ready)
            items = self._emit(rec)
            out += items if sent is not None and not sent.holds(seq) else []
        self._done = int(before) - 1 if self._running else max((rec.seq for rec in records), default=-1)
        return out

    def mark(self, logged: int) -> Mark:
        """What a sink holds once it has written every item given so far, and ``logged`` rows of ``history.log``."""
        return Mark(self._done, frozenset(self._beyond), logged)

    def _given(self, seq: int) -> None:
        """Record ``seq``'s items as given (``mark``); past an operation whose end is never heard, the mark stops
        waiting for it after ``MAX_BEYOND`` others (that one's items, if it ends later, are then taken as written)."""
        if seq <= self._done:
            return
        self._beyond.add(seq)
        while self._done + 1 in self._beyond:
            self._beyond.remove(self._done + 1)
            self._done += 1
        if len(self._beyond) > MAX_BEYOND:
            self._done, self._beyond = max(self._beyond), set()

    def record(self, rec: Record) -> list[Item]:
        if rec.seq in self._seeded:
            return []
        if rec.status not in TERMINAL_STATUSES:
            self._running.add(rec.seq)
            return []
        self._running.discard(rec.seq)
        heapq.heappush(self._ready, (rec.seq, rec))
        now = [failure(rec)] if rec.kind not in TRAINING and rec.status == OperationStatus.FAILED else []
        if now:
            self._given(rec.seq)
        return now + self.drain(min(self._running, default=math.inf))

    def drain(self, before: float = math.inf) -> list[Item]:
        """Everything ready that was submitted before ``before`` (default: all), in order."""
        out: list[Item] = []
        while self._ready and self._ready[0][0] < before:
            seq, rec = heapq.heappop(self._ready)
            out.extend(self._emit(rec))
            self._given(seq)
        return out

    def _emit(self, rec: Record) -> list[Item]:
        while self._starts and self._starts[0].begins(rec):  # a session that continued the run
            self._starts.pop(0)
            self._session += 1
            self._times, self._loss = [], math.nan
        self._times.append(op_times(rec.kind, rec.submitted_at, rec.started_at, rec.finished_at))
        if rec.kind not in TRAINING:
            return []
        if rec.kind == OperationKind.OPTIM_STEP and rec.error_code not in KEPT_GRADIENTS:  # a failed one too, but
            # one that kept the gradients: the next one applies them
            times, self._times = self._times, []
            loss, self._loss = self._loss, math.nan
        if rec.status == OperationStatus.FAILED:
            return [failure(rec)]
        if rec.kind == OperationKind.FORWARD_BACKWARD:
            if not math.isnan(rec.step_loss):
                self._loss = rec.step_loss if math.isnan(self._loss) else self._loss + rec.step_loss
            return []
        if rec.step is None:
            return []
        values = {"loss": loss, **{f: getattr(rec, f) for f in STEP_FIELDS}}
        values["step_time_s"], values["queue_s"] = step_times(times)
        figures = {k: float(v) for k, v in values.items() if not math.isnan(v)}
        return [Point(rec.step, figures, rec.finished_at, self._session)]


def failure(rec: Record) -> Failure:
    """``rec`` as a failure, its texts without lone surrogates (``shown``: a server's message may hold one)."""
    code, message = rec.error_code or "UNKNOWN", rec.error_message or ""
    kind, op_id, code, message = (escaped(text) for text in (rec.kind, rec.op_id, code, message))
    return Failure(rec.seq, rec.step or 0, kind, op_id, code, message, rec.finished_at)


def logged(row: dict[str, Any], at: float, session: int | None = None) -> Point:
    """A ``history.log`` row as a point (NaN left out, as ``History.steps`` keeps the last number) of ``session`` (the
    one that logged it; None: read back from a run folder an older rlnb wrote). A figure named like a steps column
    (``loss``, in a run written before ``log`` refused it) is ``"loss (logged)"``, as ``History.steps`` shows it:
    merged into its step's point, it replaced the step's own loss there."""
    values = {
        SHADOWED.format(k) if k in STEP_COLUMNS else k: float(v)
        for k, v in row.items()
        if k != "step" and not math.isnan(float(v))
    }
    return Point(int(row["step"]), values, at, session)


def merge(items: Iterable[Item]) -> tuple[list[Point], list[Failure]]:
    """One point per step of each session (later figures win), by session then step; failures in order. Keyed by step
    alone, a run continued from step 0 would lose its earlier sessions' points (``rlnb.export``, a resend spanning
    sessions). A point of no session (a logged row of a run folder an older rlnb wrote, which keeps no session for one)
    joins each session's point of its step, as ``History.steps`` shows it; where none has that step, it is one of its
    own, in the first session whose steps reach it (else the last)."""
    points: dict[tuple[int, int], Point] = {}
    loose: dict[int, Point] = {}
    failures: list[Failure] = []
    for item in items:
        if isinstance(item, Failure):
            failures.append(item)
        elif item.session is None:
            _into(loose, item.step, item)
        else:
            _into(points, (item.session, item.step), item)
    if loose:
        at_step: dict[int, list[Point]] = {}
        reach: dict[int, int] = {}  # session -> its last step
        for (session, step), point in points.items():
            at_step.setdefault(step, []).append(point)
            reach[session] = max(reach.get(session, step), step)
        for step, row in loose.items():
            for point in at_step.get(step, []):
                point.values.update(row.values)
                point.time = max(point.time, row.time)
            if step not in at_step:
                session = min((s for s, last in reach.items() if last >= step), default=max(reach, default=0))
                points[session, step] = Point(step, row.values, row.time, session)
    return [points[key] for key in sorted(points)], failures


def _into(points: dict[Any, Point], key: Any, item: Point) -> None:
    """``item``'s figures into ``points[key]`` (a copy made at its first)."""
    if key in points:
        points[key].values.update(item.values)
        points[key].time = max(points[key].time, item.time)
    else:
        points[key] = Point(item.step, dict(item.values), item.time, item.session)


def unsent(records: list[Record], starts: list[SessionStart], rows: list[Row], sent: Mark) -> list[Item]:
    """What a sink that holds ``sent`` of a run has not written: the items of ``records`` past it (``Steps.seed``) and
    ``rows`` (``History.logged_rows``) past its count, each row stamped with the latest end of an operation and put on
    the point of the session that logged it."""
    items = Steps(starts).seed(records, sent)
    at = max((r.finished_at for r in records if not math.isnan(r.finished_at)), default=time.time())
    return items + [logged(row, at, session) for row, session in rows[sent.logged :]]


def replay(history: History, at: float) -> tuple[list[Point], list[Failure]]:
    """Every point and failure of a finished or reloaded run (``history.log`` rows stamped ``at``
    unless their step's point has a later time)."""
    steps = Steps(session_starts(history.config))
    items: list[Item] = [i for rec in history.records for i in steps.record(rec)] + steps.drain()
    items += [logged(row, at, session) for row, session in history.logged_rows()]
    return merge(items)
