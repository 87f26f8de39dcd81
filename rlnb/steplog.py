"""``StepLog``: the steps table kept up to date as operations finish, instead of rebuilt from every
operation each time someone looks.

A History feeds it each operation once when it is submitted and once when it ends, and every
``log()`` row. It keeps one row per completed optim-step (in submission order), the loss of the
forward-backwards feeding each step, the published weights versions and the last logged value of
each figure per step. ``frame()`` equals ``history.steps_table(history.df, history.logged)`` at a
cost that grows with the number of steps, not operations; ``settled(start)`` hands a live view the
rows that will not change any more, so it can append them to what it drew.

Records are read through their attributes only (``seq``, ``kind``, ``status``, ``step``, ``loss``,
the gradient-norm fields, ``finished_at``, ``na_reason``, ``weights_version``).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

COMPLETED = "TRAINING_OPERATION_STATUS_COMPLETED"
ROW_FLOATS = ("grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate")
"""Figures of a completed optim-step, copied into its row."""
ORDER = (
    "step",
    "loss",
    "grad_norm",
    "grad_norm_muon",
    "grad_norm_adam",
    "grad_clip_norm",
    "learning_rate",
    "step_time_s",
    "weights_version",
)
"""Columns of ``History.steps`` before the logged figures."""


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

    def _clear(self) -> None:
        self._rows: list[StepRow] = []
        self._losses: dict[int, list[float]] = {}  # step fed -> losses of its completed forward-backwards
        self._open_fb: Counter[int] = Counter()  # step fed -> forward-backwards not finished
        self._open_opt: dict[int, None] = {}  # seqs of unfinished optim-steps, in submission order
        self._versions: set[int] = set()
        self._logged: list[dict[str, Any]] = []
        self._user: dict[int, dict[str, float]] = {}  # step -> last non-NaN value of each logged figure
        self._names: dict[str, None] = {}  # logged figure names, in order of first appearance
        self._settled = 0
        self.na_reason: str | None = None
        """Why the latest optim-step reported no gradient norm (a remote API), if it did not."""

    # -- feeding -------------------------------------------------------------------------------

    def submitted(self, rec: Any) -> None:
        with self._lock:
            if rec.kind == "forward-backward" and rec.step is not None:
                self._open_fb[rec.step + 1] += 1
            elif rec.kind == "optim-step":
                self._open_opt[rec.seq] = None

    def finished(self, rec: Any) -> None:
        """``rec`` has just reached a terminal status (call once per operation, after ``submitted``)."""
        with self._lock:
            done = rec.status == COMPLETED
            if rec.kind == "forward-backward" and rec.step is not None:
                fed = rec.step + 1
                self._open_fb[fed] -= 1
                if self._open_fb[fed] <= 0:
                    del self._open_fb[fed]
                if done and not math.isnan(rec.loss):
                    self._losses.setdefault(fed, []).append(rec.loss)
            elif rec.kind == "optim-step":
                self._open_opt.pop(rec.seq, None)
                if done and rec.step is not None:
                    self._add_row(rec)
            elif rec.kind == "weights-sync" and done and rec.weights_version is not None:
                self._versions.add(int(rec.weights_version))

    def _add_row(self, rec: Any) -> None:
        row = StepRow(rec.seq, int(rec.step), *(float(getattr(rec, f)) for f in ROW_FLOATS), rec.finished_at)
        self.na_reason = rec.na_reason if math.isnan(row.grad_norm) else None
        at = len(self._rows)
        while at and self._rows[at - 1].seq > row.seq:  # finished out of order (a remote poller): rare
            at -= 1
        self._rows.insert(at, row)

    def logged(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._logged.append(row)
            values = self._user.setdefault(row["step"], {})
            for name, value in row.items():
                if name == "step":
                    continue
                self._names.setdefault(name, None)
                if not math.isnan(value):
                    values[name] = value

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def names(self) -> list[str]:
        """Logged figure names, in order of first appearance."""
        with self._lock:
            return list(self._names)

    def _loss(self, step: int) -> float:
        losses = self._losses.get(step)
        return math.fsum(losses) if losses else math.nan

    def settled(self, start: int) -> list[StepRow]:
        """Rows from index ``start`` that are final: every earlier optim-step has finished and every
        forward-backward feeding them too. A live view appends these and never looks back."""
        with self._lock:
            first_open = next(iter(self._open_opt), math.inf)
            n = self._settled
            while n < len(self._rows):
                row = self._rows[n]
                if row.seq > first_open or self._open_fb.get(row.step):
                    break
                n += 1
            self._settled = n
            out = self._rows[start:n]
            for row in out:
                row.loss = self._loss(row.step)
            return list(out)

    def logged_since(self, start: int) -> list[dict[str, Any]]:
        """``log()`` rows from index ``start`` (they never change)."""
        with self._lock:
            return self._logged[start:]

    def latest(self, n: int) -> list[tuple[StepRow, dict[str, float]]]:
        """The last ``n`` rows (settled or not), each with its logged figures."""
        with self._lock:
            rows = self._rows[-n:] if n > 0 else []
            out = []
            for row in rows:
                row.loss = self._loss(row.step)
                out.append((row, dict(self._user.get(row.step, {}))))
            return out

    def frame(self) -> pd.DataFrame:
        """The steps table (``History.steps``), equal to ``history.steps_table`` on the same history."""
        with self._lock:
            rows = list(self._rows)
            loss = {row.step: self._loss(row.step) for row in rows}
            versions = set(self._versions)
            user = {step: dict(values) for step, values in self._user.items()}
            names = list(self._names)
            any_logged = bool(self._logged)
        n = len(rows)
        steps = np.fromiter((r.step for r in rows), np.int64, n)
        table = pd.DataFrame({"step": steps, "loss": np.fromiter((loss[r.step] for r in rows), float, n)})
        for col in ROW_FLOATS:
            table[col] = np.fromiter((getattr(r, col) for r in rows), float, n)
        finished = pd.Series(pd.to_datetime(np.fromiter((r.finished_at for r in rows), float, n), unit="s", utc=True))
        table["step_time_s"] = finished.diff().dt.total_seconds()
        table["weights_version"] = pd.array([s if s in versions else None for s in steps.tolist()], dtype="Int64")
        table = table[list(ORDER)]
        if any_logged:
            frame = pd.DataFrame.from_dict(user, orient="index", columns=names, dtype=float)
            table = table.join(frame.rename_axis("step"), on="step")
        return table
