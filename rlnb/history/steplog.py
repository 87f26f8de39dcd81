"""``StepLog``: the steps table kept up to date as operations finish, instead of rebuilt from every
operation each time someone looks.

A History feeds it each operation once when it is submitted and once when it ends, and every
``log()`` row. It keeps one row per completed optim-step (in submission order), the loss of the
forward-backwards feeding each step, each step's operation times (its compute time and its wait,
``rlnb.history.timing``), the published weights versions and the last logged value of each figure per
step (the table's columns and rows, and how a ``log()`` row is checked: ``rlnb.history.figures``). ``frame()``
is the steps table (``History.steps``; ``tables.steps_table`` feeds a fresh log from an operations table) at a
cost that grows with the number of steps, not operations; ``settled(start)``
hands a live view the rows that will not change any more, so it can append them to what it drew.

Records are read through their attributes only (``seq``, ``kind``, ``status``, ``step``, ``loss``,
the gradient-norm fields, the three times, ``na_reason``, ``weights_version``).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from rlnb.history.figures import ROW_FLOATS, SHADOWED, STEP_COLUMNS, StepRow
from rlnb.history.runconfig import SessionStart
from rlnb.history.timing import UNWAITED, Times, step_times
from rlnb.wire import TERMINAL_STATUSES, OperationErrorCode, OperationKind, OperationStatus

KEPT_GRADIENTS = frozenset({OperationErrorCode.INVALID_INPUT})
"""A failed optim-step's codes that changed nothing and kept the gradients: the next completed one applies them, so
its row sums their loss (a ``NON_FINITE_LOSS`` one dropped them)."""


def total(losses: list[float]) -> float:
    """The exact sum of ``losses`` as the float nearest it: inf past the largest float, NaN for inf and -inf together.
    ``math.fsum`` raised there (``OverflowError`` for two losses of 1e308) while a forward-backward was recorded: its
    line never reached the run folder, and the step's loss read 1e308."""
    try:
        return math.fsum(losses)
    except (OverflowError, ValueError):
        if any(math.isnan(x) for x in losses) or {math.inf, -math.inf} <= set(losses):
            return math.nan
        if math.inf in losses or -math.inf in losses:
            return next(x for x in losses if math.isinf(x))
        exact = sum(map(Fraction, losses), Fraction(0))  # finite: the overflow is the sum's, or a partial sum's
        return float(exact) if abs(exact) <= Fraction(sys.float_info.max) else math.inf if exact > 0 else -math.inf


_Row = tuple[int, int, float, float, float, float, float, float, int]
_FIGURES = 8
"""The numeric fields of a ``_Row`` (seq, step, 5 figures, finished_at); its last is the step's segment."""


class StepLog:
    """Thread-safe; ``submitted``/``finished``/``logged`` are called by a History under its own lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.generation = 0
        """Bumped by ``reset``: what was handed out before is void, start reading from 0 again."""
        self._clear()

    def reset(self) -> None:
        """Forget everything (to be fed again from the start)."""
        with self._lock:
            self._clear()
            self.generation += 1

    def feed(
        self,
        records: Iterable[Any],
        logged: Iterable[dict[str, Any]],
        unfinished: bool,
        sessions: Iterable[SessionStart] = (),
    ) -> None:
        """Feed records in order — finished ones as submitted and finished, the others as submitted with
        ``unfinished`` (a live history's) or else as ``skipped`` (a loaded run's) — then ``log()`` rows:
        the state of a log that followed them as they happened. ``sessions``: where later sessions continued the
        run (``runconfig.session_starts``); each one's first record starts a step (``new_session``)."""
        starts = list(sessions)
        for rec in records:
            while starts and starts[0].begins(rec):
                starts.pop(0)
                self.new_session()
            done = rec.status in TERMINAL_STATUSES
            if done or unfinished:
                self.submitted(rec)
            else:
                self.skipped(rec)
            if done:
                self.finished(rec)
        for row in logged:
            self.logged(row)

    def _clear(self) -> None:
        # Completed optim-steps in submission order, one list per column (cheap to turn into arrays).
        self._rows: list[_Row] = []  # completed optim-steps in submission order, as StepRow's fields
        # By segment (the optim-steps submitted before), not by the step the session expected at submission: a
        # failed optim-step ends its segment without a step, and a continued run repeats step numbers.
        self._losses: dict[int, list[float]] = {}  # segment -> losses of its completed forward-backwards
        self._loss: dict[int, float] = {}  # segment -> their sum
        self._open_fb: dict[int, int] = {}  # segment -> forward-backwards not finished
        self._open_opt: dict[int, None] = {}  # seqs of unfinished optim-steps, in submission order
        self._segments = 0  # optim-steps submitted so far: the segment the next operation belongs to
        self._segment_of: dict[int, int] = {}  # seq of an unfinished operation -> its segment
        self._into: dict[int, int] = {}  # segment of a failed optim-step that kept its gradients -> the next one
        self._times: dict[int, list[Times]] = {}  # segment -> times of its finished operations
        self._versions: dict[int, int] = {}  # segment of an optim-step -> the version a weights-sync published after it
        self._logged: list[dict[str, Any]] = []
        self._user: dict[str, dict[int, float]] = {}  # figure -> step -> its last non-NaN logged value
        self._nan_at: dict[str, list[int]] = {}  # figure -> the ``log()`` rows (their indices) that logged it NaN
        self._settled = 0
        self.na_reason: str | None = None
        """Why the latest optim-step reported no gradient norm (a remote API), if it did not."""

    # -- feeding -------------------------------------------------------------------------------

    def submitted(self, rec: Any) -> None:
        with self._lock:
            self._segment_of[rec.seq] = self._segments
            self._segments += rec.kind == OperationKind.OPTIM_STEP
            if rec.kind == OperationKind.FORWARD_BACKWARD:
                self._open_fb[self._segment_of[rec.seq]] = self._open_fb.get(self._segment_of[rec.seq], 0) + 1
            elif rec.kind == OperationKind.OPTIM_STEP:
                self._open_opt[rec.seq] = None

    def new_session(self) -> None:
        """Another session continues the run: its operations start a step of their own (the forward-backwards the
        one before fed and never stepped, as it died, are no part of it)."""
        with self._lock:
            self._segments += 1

    def skipped(self, rec: Any) -> None:
        """``rec`` will never finish (a loaded run's): it only counts where the steps after it begin."""
        with self._lock:
            self._segments += rec.kind == OperationKind.OPTIM_STEP

    def finished(self, rec: Any) -> None:
        """``rec`` has just reached a terminal status (call once per operation, after ``submitted``). Its times are
        ``timing.op_times``'s rule applied inline, kept so for the call an operation it saves:
        ``tests/history/test_timing_rule.py`` pins the two alike for every kind."""
        with self._lock:
            segment = self._segment_of.pop(rec.seq, self._segments)  # a weights-sync's: the optim-step before it
            home = self._home(segment) if self._into else segment  # no call where no step kept its gradients
            started = float(rec.started_at)
            waited = started if rec.kind in UNWAITED else float(rec.submitted_at)
            self._times.setdefault(home, []).append((waited, started, float(rec.finished_at)))
            finish = self._FINISHED.get(rec.kind)
            if finish is not None:
                finish(self, rec, rec.status == OperationStatus.COMPLETED, segment)

    def _home(self, segment: int) -> int:
        """The segment whose optim-step applies ``segment``'s gradients (itself unless its optim-step kept them)."""
        while segment in self._into:
            segment = self._into[segment]
        return segment

    def _forward_backward_finished(self, rec: Any, done: bool, segment: int) -> None:
        segment = self._home(segment) if self._into else segment
        left = self._open_fb.pop(segment, 0) - 1
        if left > 0:
            self._open_fb[segment] = left
        loss = rec.step_loss if done else math.nan  # a property: read once, a call a forward-backward less
        if not math.isnan(loss):
            losses = self._losses.setdefault(segment, [])
            losses.append(loss)
            self._loss[segment] = total(losses)

    def _optim_step_finished(self, rec: Any, done: bool, segment: int) -> None:
        self._open_opt.pop(rec.seq, None)
        if done and rec.step is not None:
            self._add_row(rec, segment)
        elif not done and rec.error_code in KEPT_GRADIENTS:  # the next segment's optim-step applies them
            self._into[segment] = later = segment + 1
            self._times.setdefault(later, []).extend(self._times.pop(segment, ()))
            if losses := self._losses.pop(segment, []) + self._losses.get(later, []):
                self._losses[later], self._loss[later] = losses, total(losses)
            if open_fb := self._open_fb.pop(segment, 0) + self._open_fb.get(later, 0):
                self._open_fb[later] = open_fb

    def _weights_sync_finished(self, rec: Any, done: bool, segment: int) -> None:
        if done and rec.weights_version is not None:  # it published the weights of the optim-step before it
            self._versions.setdefault(segment - 1, int(rec.weights_version))

    _FINISHED: dict[str, Callable[[StepLog, Any, bool, int], None]] = {
        OperationKind.FORWARD_BACKWARD: _forward_backward_finished,
        OperationKind.OPTIM_STEP: _optim_step_finished,
        OperationKind.WEIGHTS_SYNC: _weights_sync_finished,
    }
    """What a finished operation of each kind changes (``done``: it COMPLETED; the step ``segment`` it
    belongs to); the other kinds, nothing beyond their times."""

    def _add_row(self, rec: Any, segment: int) -> None:
        gn = float(rec.grad_norm)
        self.na_reason = rec.na_reason if math.isnan(gn) else None
        row: _Row = (
            rec.seq,
            int(rec.step),
            gn,
            float(rec.grad_norm_muon),
            float(rec.grad_norm_adam),
            float(rec.grad_clip_norm),
            float(rec.learning_rate),
            float(rec.finished_at),
            segment,
        )
        rows = self._rows
        if not rows or rows[-1][0] < rec.seq:
            rows.append(row)
            return
        at = len(rows)
        while at and rows[at - 1][0] > rec.seq:  # finished out of order (a remote poller): rare
            at -= 1
        rows.insert(at, row)

    def logged(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._logged.append(row)
            for name, value in row.items():
                if name != "step":
                    values = self._user.setdefault(name, {})
                    if not math.isnan(value):
                        values[row["step"]] = value
                    else:
                        self._nan_at.setdefault(name, []).append(len(self._logged) - 1)

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    def _row(self, i: int) -> StepRow:
        seq, step, gn, muon, adam, clip, lr, finished, segment = self._rows[i]
        run, queue = step_times(self._times.get(segment, ()))
        loss = self._loss.get(segment, math.nan)
        return StepRow(seq, step, gn, muon, adam, clip, lr, finished, loss=loss, run_s=run, queue_s=queue)

    def settled(self, start: int) -> list[StepRow]:
        """Rows from index ``start`` that are final: every earlier optim-step has finished and every
        forward-backward feeding them too. A live view appends these and never looks back."""
        with self._lock:
            first_open = next(iter(self._open_opt), math.inf)
            rows, n = self._rows, self._settled
            while n < len(rows) and rows[n][0] < first_open and not self._open_fb.get(rows[n][-1]):
                n += 1
            self._settled = n
            return [self._row(i) for i in range(start, n)]

    def logged_since(self, start: int) -> list[dict[str, Any]]:
        """``log()`` rows from index ``start`` (they never change)."""
        with self._lock:
            return self._logged[start:]

    def nan_rows(self, name: str) -> list[int]:
        """The indices of the ``log()`` rows that logged ``name`` as NaN (a table of the rows holds NaN where a call
        did not log it, too: the plots tell the two apart by these)."""
        with self._lock:
            return list(self._nan_at.get(name, ()))

    def step_values(self, name: str) -> dict[int, float]:
        """``name``'s value at each step it was logged at, in step order, as the steps table reads it: the last number
        logged there, NaN where only NaN was."""
        with self._lock:
            values = dict(self._user.get(name, {}))
            for i in self._nan_at.get(name, ()):
                values.setdefault(self._logged[i]["step"], math.nan)
        return dict(sorted(values.items()))

    def latest(self, n: int) -> list[tuple[StepRow, dict[str, float]]]:
        """The last ``n`` rows (settled or not), each with its logged figures."""
        with self._lock:
            rows = [self._row(i) for i in range(max(0, len(self) - n), len(self))]
            return [(row, {k: v[row.step] for k, v in self._user.items() if row.step in v}) for row in rows]

    def frame(self) -> pd.DataFrame:
        """The steps table (``History.steps``): one row per completed optim-step, with the loss of the
        forward-backwards it applied, its figures, its compute time and wait, the weights version published
        at it and the last logged value of each figure at its step."""
        with self._lock:
            table = np.array(self._rows, dtype=float).reshape(-1, _FIGURES + 1)
            steps = [row[1] for row in self._rows]
            times = np.array([step_times(self._times.get(row[-1], ())) for row in self._rows], dtype=float)
            loss = np.array([self._loss.get(row[-1], math.nan) for row in self._rows], dtype=float)
            versions = pd.array([self._versions.get(row[-1]) for row in self._rows], dtype="Int64")
            user = {name: np.array([v.get(s, math.nan) for s in steps], dtype=float) for name, v in self._user.items()}
            any_logged = bool(self._logged)
        columns = {c: table[:, 2 + i] for i, c in enumerate(ROW_FLOATS)}
        frame = pd.DataFrame({"step": np.array(steps, dtype=np.int64), "loss": loss, **columns})
        frame["step_time_s"] = times[:, 0] if len(times) else np.empty(0)
        frame["queue_s"] = times[:, 1] if len(times) else np.empty(0)
        frame["weights_version"] = versions
        if any_logged:  # a figure named like a column (logged before ``log`` refused it) keeps its own column
            for name, values in user.items():
                frame[SHADOWED.format(name) if name in STEP_COLUMNS else name] = values
        return frame
