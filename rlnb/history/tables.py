"""The pandas tables of a history: ``History.df`` built from records (incrementally, ``OpsTable``: ``_concat``
appends the rows of newly finished operations to a cached frame), the steps table of an operations table, and
the history's notebook display.
"""

from __future__ import annotations

import html
import threading
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from rlnb import wire
from rlnb.history.export import read_back
from rlnb.history.record import CATEGORIES, COLUMNS, FLOATS, TIMES, Record, as_row, uncount
from rlnb.history.runconfig import session_starts
from rlnb.history.steplog import StepLog
from rlnb.history.store import RunStore


def _columns(records: list[Record]) -> dict[str, list[Any]]:
    return {name: [getattr(r, name) for r in records] for name in COLUMNS}


def _ops_frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """``History.df`` rows from column lists."""
    n = len(columns["seq"])
    frame = pd.DataFrame(
        {
            **columns,
            **{c: pd.Categorical(np.array(columns[c], dtype=object)) for c in CATEGORIES},
            **{c: np.fromiter(columns[c], float, n) for c in FLOATS},
            **{c: pd.array(columns[c], dtype="Int64") for c in ("seq", "step", "weights_version")},
        },
        columns=list(COLUMNS),
    )
    times = {c: np.fromiter(columns[c], float, n) for c in ("submitted_at", "started_at", "finished_at")}
    frame["queue_s"] = times["started_at"] - times["submitted_at"]
    frame["run_s"] = times["finished_at"] - times["started_at"]
    for col, values in times.items():
        frame[col] = pd.to_datetime(values, unit="s", utc=True)
    return frame


def _concat(head: pd.DataFrame | None, tail: pd.DataFrame) -> pd.DataFrame:
    """``head`` then ``tail`` as one frame, categories merged as a fresh build would make them."""
    if head is None or not len(head):
        return tail
    if not len(tail):
        return head.copy(deep=False)  # callers may assign columns; the cache stays as it is
    frame = pd.concat([head, tail], ignore_index=True)
    for col in CATEGORIES:
        a, b = head[col].array, tail[col].array
        if not len(a.categories):  # all missing: its categories' dtype is a placeholder
            a = a.set_categories(b.categories)
        elif not len(b.categories):
            b = b.set_categories(a.categories)
        frame[col] = union_categoricals([a, b], sort_categories=True)
    for col in ("op_id", "error_message", "na_reason"):  # text: str dtype once any value is a string
        text = [d for d in (head[col].dtype, tail[col].dtype) if isinstance(d, pd.StringDtype)]
        if text and frame[col].dtype != text[0]:
            frame[col] = frame[col].astype(text[0])
    return frame


class OpsTable:
    """``History.df`` built incrementally: the rows of operations that had finished are kept from the previous
    build, so during a run only the newer ones are built again."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock  # the history's: it guards its records and these kept rows together
        self._frame: pd.DataFrame | None = None  # the rows of the first ``kept`` records, all finished
        self.kept = 0
        self._refinished = 0  # updates of already finished records (they invalidate the kept rows)

    def refinished(self) -> None:
        """A finished record changed again (called under the history's lock): the kept rows may hold its old
        state."""
        self._frame, self.kept, self._refinished = None, 0, self._refinished + 1

    def uncount(self, records: list[Record], failed: Record, store: RunStore | None) -> None:
        """``record.uncount`` under the history's lock. A record it lowers that had finished (reported before the
        failure, out of order) drops the kept rows and is written again: a run's latest line of an operation is its
        state."""
        with self._lock:
            finished = [rec for rec in uncount(records, failed) if rec.status in wire.TERMINAL_STATUSES]
            if finished:
                self.refinished()
        if store is not None:
            for rec in finished:
                store.write_op(as_row(rec))

    def frame(self, records: list[Record]) -> pd.DataFrame:
        """One row per record, in order: the kept rows, then the newer ones built."""
        with self._lock:
            cached, start, refinished = self._frame, self.kept, self._refinished
            tail = records[start:]
            done = next((i for i, r in enumerate(tail) if r.status not in wire.TERMINAL_STATUSES), len(tail))
            finished, rest = _columns(tail[:done]), _columns(tail[done:])
        prefix = _concat(cached, _ops_frame(finished)) if done else cached
        if done:
            with self._lock:
                if self._refinished == refinished:  # no finished record changed meanwhile
                    self._frame, self.kept = prefix, start + done
        return _concat(prefix, _ops_frame(rest))


def steps_table(ops: pd.DataFrame, logged: pd.DataFrame | None = None) -> pd.DataFrame:
    """``History.steps`` of an operations table (``History.df``, e.g. one a plot was given): its rows fed
    to a ``StepLog``, the one builder of the steps table; where later sessions continued the run, as ``History.df``
    says in ``attrs``. A table read back from ``history.to_csv`` / ``to_parquet`` is taken too (``read_back``), its rows
    in any order (fed in the order of their ``seq``)."""
    ops = read_back(ops)
    starts = session_starts(ops.attrs)
    ops = in_run_order(ops)
    log = StepLog()
    rows = logged.to_dict("records") if logged is not None and "step" in logged else []
    log.feed(_records(ops), rows, unfinished=False, sessions=starts)
    return log.frame()


def in_run_order(ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with its rows in the order the operations were submitted (their ``seq``): sorted by another column
    (``df.sort_values("kind")``, a spreadsheet), its rows fed as they stood summed every loss into step 1, and the
    timeline's lanes and "latest" failures went by the rows' order."""
    if "seq" not in ops or ops["seq"].is_monotonic_increasing:
        return ops
    return ops.sort_values("seq", kind="stable")


def _records(ops: pd.DataFrame) -> list[Record]:
    """The records behind an operations table, as far as the steps table reads them (missing values
    as ``Record`` holds them: None, NaN for figures; ``params``, which marks an evaluation)."""
    table = ops[["seq", "kind", "status", "error_code", "step", "weights_version", "na_reason"]].astype(object)
    table = table.where(table.notna(), None)
    if "params" in ops:  # it marks an evaluation (forward_only), whose loss is no part of its step's
        table["params"] = [p if isinstance(p, dict) else {} for p in ops["params"]]
    for name in FLOATS:
        table[name] = ops[name].astype(float)
    for name in TIMES:
        table[name] = (ops[name] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return [Record(**row) for row in table.to_dict("records")]


def summary_html(df: pd.DataFrame, steps: pd.DataFrame, run_id: str) -> str:
    """A history's notebook display: its counts by status, its last step, and its last eight operations."""
    by_status = df.status.value_counts()
    last = steps.iloc[-1] if len(steps) else None
    head = (
        f"<b>rlnb history</b> {html.escape(run_id)}: {len(df)} operations "
        + ", ".join(  # a loaded run folder is data: what it says is escaped
            f"{n} {html.escape(wire.short_name(s).lower())}" for s, n in by_status.items() if n
        )
        + (f"; step {int(last.step)}, loss {last.loss:.4g}, grad norm {last.grad_norm:.3g}" if last is not None else "")
    )
    cols = ["seq", "kind", "status", "error_code", "step", "loss", "grad_norm", "learning_rate", "run_s"]
    return f"<div>{head}</div>" + df[cols].tail(8).to_html(index=False, na_rep="n/a", float_format="{:.4g}".format)
