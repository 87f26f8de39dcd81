"""``StepLog``: the steps table kept up to date as operations finish, instead of rebuilt from every
operation each time someone looks.

A History feeds it each operation once when it is submitted and once when it ends, and every
``log()`` row. It keeps one row per completed optim-step (in submission order), the loss of the
forward-backwards feeding each step, the published weights versions and the last logged value of
each figure per step. ``frame()`` is the steps table (``History.steps``; ``tables.steps_table`` feeds
a fresh log from an operations table) at a cost that grows with the number of steps, not operations;
``settled(start)`` hands a live view the rows that will not change any more, so it can append them to
what it drew.

Records are read through their attributes only (``seq``, ``kind``, ``status``, ``step``, ``loss``,
the gradient-norm fields, ``finished_at``, ``na_reason``, ``weights_version``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rlnb.wire import TERMINAL_STATUSES, OperationKind, OperationStatus

ROW_FLOATS = ("grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate")
"""Figures of a completed optim-step, copied into its row."""


_Row = tuple[int, int, float, float, float, float, float, float]


@dataclass(slots=True)
class StepRow:
    """One completed optimizer step. ``loss`` is the sum over its forward-backwards so far."""

    seq: int
    step: int
    grad_norm: float
    grad_norm_muon: float
    grad_norm_adam: float
    grad_clip_norm: float
    learning_rate: float
    finished_at: float
    loss: float = math.nan


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

    def feed(self, records: Iterable[Any], logged: Iterable[dict[str, Any]], unfinished: bool) -> None:
        """Feed finished records (and, with ``unfinished``, the others as submitted) in order, then
        ``log()`` rows: the state of a log that followed them as they happened."""
        for rec in records:
            done = rec.status in TERMINAL_STATUSES
            if done or unfinished:
                self.submitted(rec)
            if done:
                self.finished(rec)
        for row in logged:
            self.logged(row)

    def _clear(self) -> None:
        # Completed optim-steps in submission order, one list per column (cheap to turn into arrays).
        self._rows: list[_Row] = []  # completed optim-steps in submission order, as StepRow's fields
        self._losses: dict[int, list[float]] = {}  # step fed -> losses of its completed forward-backwards
        self._loss: dict[int, float] = {}  # step fed -> their sum
        self._open_fb: dict[int, int] = {}  # step fed -> forward-backwards not finished
        self._open_opt: dict[int, None] = {}  # seqs of unfinished optim-steps, in submission order
        self._versions: set[int] = set()
        self._logged: list[dict[str, Any]] = []
        self._user: dict[str, dict[int, float]] = {}  # figure -> step -> its last non-NaN logged value
        self._settled = 0
        self.na_reason: str | None = None
        """Why the latest optim-step reported no gradient norm (a remote API), if it did not."""

    # -- feeding -------------------------------------------------------------------------------

    def submitted(self, rec: Any) -> None:
        with self._lock:
            if rec.kind == OperationKind.FORWARD_BACKWARD and rec.step is not None:
                self._open_fb[rec.step + 1] = self._open_fb.get(rec.step + 1, 0) + 1
            elif rec.kind == OperationKind.OPTIM_STEP:
                self._open_opt[rec.seq] = None

    def finished(self, rec: Any) -> None:
        """``rec`` has just reached a terminal status (call once per operation, after ``submitted``)."""
        with self._lock:
            finish = self._FINISHED.get(rec.kind)
            if finish is not None:
                finish(self, rec, rec.status == OperationStatus.COMPLETED)

    def _forward_backward_finished(self, rec: Any, done: bool) -> None:
        if rec.step is None:
            return
        fed = rec.step + 1
        left = self._open_fb.pop(fed, 0) - 1
        if left > 0:
            self._open_fb[fed] = left
        if done and not math.isnan(rec.loss):
            losses = self._losses.setdefault(fed, [])
            losses.append(rec.loss)
            self._loss[fed] = math.fsum(losses)

    def _optim_step_finished(self, rec: Any, done: bool) -> None:
        self._open_opt.pop(rec.seq, None)
        if done and rec.step is not None:
            self._add_row(rec)

    def _weights_sync_finished(self, rec: Any, done: bool) -> None:
        if done and rec.weights_version is not None:
            self._versions.add(int(rec.weights_version))

    _FINISHED: dict[str, Callable[[StepLog, Any, bool], None]] = {
        OperationKind.FORWARD_BACKWARD: _forward_backward_finished,
        OperationKind.OPTIM_STEP: _optim_step_finished,
        OperationKind.WEIGHTS_SYNC: _weights_sync_finished,
    }
    """What a finished operation of each kind changes (``done``: it COMPLETED); the other kinds, nothing."""

    def _add_row(self, rec: Any) -> None:
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

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    def _row(self, i: int) -> StepRow:
        row = self._rows[i]
        return StepRow(*row, loss=self._loss.get(row[1], math.nan))

    def settled(self, start: int) -> list[StepRow]:
        """Rows from index ``start`` that are final: every earlier optim-step has finished and every
        forward-backward feeding them too. A live view appends these and never looks back."""
        with self._lock:
            first_open = next(iter(self._open_opt), math.inf)
            rows, n = self._rows, self._settled
            while n < len(rows) and rows[n][0] < first_open and not self._open_fb.get(rows[n][1]):
                n += 1
            self._settled = n
            return [self._row(i) for i in range(start, n)]

    def logged_since(self, start: int) -> list[dict[str, Any]]:
        """``log()`` rows from index ``start`` (they never change)."""
        with self._lock:
            return self._logged[start:]

    def latest(self, n: int) -> list[tuple[StepRow, dict[str, float]]]:
        """The last ``n`` rows (settled or not), each with its logged figures."""
        with self._lock:
            rows = [self._row(i) for i in range(max(0, len(self) - n), len(self))]
            return [(row, {k: v[row.step] for k, v in self._user.items() if row.step in v}) for row in rows]

    def frame(self) -> pd.DataFrame:
        """The steps table (``History.steps``): one row per completed optim-step, with the loss of the
        forward-backwards it applied, its figures, the weights version published at it and the last
        logged value of each figure at its step."""
        with self._lock:
            table = np.array(self._rows, dtype=float).reshape(-1, 8)  # seq, step, 5 figures, finished_at
            steps = [row[1] for row in self._rows]
            loss = np.array([self._loss.get(s, math.nan) for s in steps], dtype=float)
            versions = pd.array([s if s in self._versions else None for s in steps], dtype="Int64")
            user = {name: np.array([v.get(s, math.nan) for s in steps], dtype=float) for name, v in self._user.items()}
            any_logged = bool(self._logged)
        columns = {c: table[:, 2 + i] for i, c in enumerate(ROW_FLOATS)}
        frame = pd.DataFrame({"step": np.array(steps, dtype=np.int64), "loss": loss, **columns})
        finished = pd.Series(pd.to_datetime(table[:, 7], unit="s", utc=True))
        frame["step_time_s"] = finished.diff().dt.total_seconds()
        frame["weights_version"] = versions
        if any_logged:  # a logged figure may not shadow a column of the table
            clash = set(user) & set(frame.columns)
            if clash:
                raise ValueError(f"logged figures may not be named like a steps column: {sorted(clash)}")
            for name, values in user.items():
                frame[name] = values
        return frame
