"""What a ``History`` shows of what it recorded: its pandas tables (``df``, ``steps``, ``logged``, ``completions``),
its notebook display, and all of it written out (``save``, ``to_csv``, ``to_parquet``). ``HistoryViews`` is
``History``'s base class: it reads the state ``rlnb.history.history`` keeps and changes none of it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb._extras import need
from rlnb.history.completion_log import CompletionLog
from rlnb.history.export import save_run, with_json, with_sessions, write_whole
from rlnb.history.figures import stored
from rlnb.history.listeners import Listeners
from rlnb.history.record import Record, as_row
from rlnb.history.runconfig import session_attrs
from rlnb.history.steplog import StepLog
from rlnb.history.tables import OpsTable, summary_html


class HistoryViews:
    """``History``'s tables and exports; ``History.__init__`` sets the state they read."""

    _lock: threading.Lock
    _records: list[Record]
    _logged: list[dict[str, Any]]
    _logged_sessions: list[int | None]
    _completions: CompletionLog
    _ops_table: OpsTable
    _read_listeners: Listeners[None]
    config: dict[str, Any]
    step_log: StepLog

    @property
    def completions(self) -> pd.DataFrame:
        """Every RL step's completions, one row per completion, in the order they were kept."""
        return self._completions.frame()

    @property
    def logged(self) -> pd.DataFrame:
        """The figures given to ``log()``, one row per call."""
        if self._read_listeners.callbacks:  # none (most runs): no call, as ``History.update`` skips an empty tell
            self._read_listeners.tell(None)
        with self._lock:
            rows = list(self._logged)
        return pd.DataFrame(rows, columns=None if rows else ["step"])

    def logged_rows(self) -> list[tuple[dict[str, Any], int | None]]:
        """Each ``log()`` row with the session of the run that logged it (0 for the first; None for a row read back
        from a run folder an older rlnb wrote): a sink puts it on that session's point of its step only."""
        with self._lock:
            return list(zip(self._logged, self._logged_sessions, strict=True))

    @property
    def df(self) -> pd.DataFrame:
        """One row per operation, in submission order, with typed columns: categorical ``kind`` /
        ``status`` / ``error_code``, UTC datetimes for the times, ``queue_s`` (waiting) and
        ``run_s`` (running) in seconds. ``df.attrs["continued_at"]`` and ``["continued_seq"]``: when and at which
        operation later sessions continued the run (each starts a step of its own: ``tables.steps_table`` reads them).

        Incremental: the rows of operations that had finished are kept from the previous call, so
        during a run only the newer ones are built again."""
        if self._read_listeners.callbacks:
            self._read_listeners.tell(None)
        frame = self._ops_table.frame(self._records)
        frame.attrs.update(session_attrs(self.config))
        return frame

    @property
    def steps(self) -> pd.DataFrame:
        """One row per completed optimizer step: the loss summed over that step's forward-backwards,
        pre-clip grad norm(s), clip threshold, learning rate, ``step_time_s`` (its compute time: how
        long its operations were running, ``rlnb.history.timing``) and ``queue_s`` (how long they waited
        behind others), the weights version published after it, and your logged figures."""
        if self._read_listeners.callbacks:
            self._read_listeners.tell(None)
        return self.step_log.frame()

    def save(self, path: str | Path) -> Path:
        """Write the whole history — every operation, every logged figure, the completions, the config — as a run
        folder at ``path`` that ``History.load`` restores (for a run whose own folder could not be written, or a
        copy). ``FileExistsError`` if ``path`` holds a run or a ``config.json`` already. Returns the folder."""
        with self._lock:
            ops = [as_row(r) for r in self._records]
            logged = [stored(row, session) for row, session in zip(self._logged, self._logged_sessions, strict=True)]
        return save_run(path, self.config, ops, logged, self._completions.rows())

    def to_csv(self, path: str | Path) -> None:
        """Write ``df`` (one row per operation) to a CSV file; dict columns as JSON text. The logged figures and
        completions are not in it: ``logged`` and ``completions`` are tables of their own, ``save`` keeps all. Its
        ``session`` column numbers the sessions of a continued run (``read_back`` rebuilds ``df.attrs`` from it). A
        file is replaced whole once the new one is written (``write_whole``): a full disk leaves the old one."""
        frame = with_sessions(with_json(self.df))
        write_whole(path, lambda out: frame.to_csv(out, index=False, compression=_compression(path)))

    def to_parquet(self, path: str | Path) -> None:
        """``df`` as Parquet: needs pyarrow (``pip install rlnb[parquet]``); dict columns as JSON text."""
        need("pyarrow", "parquet", "to_parquet")  # pandas' own error names no extra
        frame = with_sessions(with_json(self.df))
        write_whole(path, lambda out: frame.to_parquet(out, index=False))

    def _repr_html_(self) -> str:
        return summary_html(self.df, self.steps, str(self.config.get("run_id", "")))


def _compression(path: Any) -> Any:
    """The compression pandas gives a CSV file by its name (``.csv.gz``), which a buffer has no name to say."""
    if not isinstance(path, str | os.PathLike):
        return "infer"
    from pandas.io.common import infer_compression

    return infer_compression(os.fspath(path), "infer")
