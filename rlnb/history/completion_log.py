"""A run's completions table: per RL step, each prompt's sampled completions with their rewards and
advantages, kept in memory and in the run folder's ``completions.jsonl`` (one line per completion), so a
finished run can be reviewed as a DataFrame (``History.completions``, ``rlnb.history.completions(path)``).
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb._input.checks import user_path
from rlnb._input.scalars import scalar
from rlnb.history.figures import checked_step
from rlnb.history.jsontext import number
from rlnb.history.reading import read_jsonl
from rlnb.history.record import INT64, fits_float, fits_int64, warn_bad
from rlnb.history.store import COMPLETIONS_FILE, OPS_FILE
from rlnb.text.prompts import escaped, surrogate

COLUMNS: dict[str, type] = {
    "step": int,
    "group": int,
    "prompt": str,
    "completion": str,
    "reward": float,
    "advantage": float,
    "length": int,
    "truncated": bool,
}
"""The table's columns and their types: ``group`` is the prompt's index in the task, ``length`` the
completion's tokens, ``truncated`` whether it reached ``max_tokens`` before a stop."""
TEXTS = ("prompt", "completion")
"""The text columns: valid Unicode only. A lone surrogate (``"\\ud800"``) would fail every ``completions`` table of the
run, loaded again or not (pandas' text columns hold UTF-8)."""
_ROW = {name: kind for name, kind in COLUMNS.items() if name != "step"}.keys()
"""A given row's columns (its ``step`` is the one given)."""


class CompletionLog:
    """The rows in memory (thread-safe), and the latest step's rows at hand for a live view."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[dict[str, Any]] = []
        self._latest: list[dict[str, Any]] = []

    def add(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._rows.extend(rows)
            if rows:
                self._latest = rows

    def latest(self) -> list[dict[str, Any]]:
        """The rows of the step logged last: the same list until another step's are added (a live view
        redraws only when it changes), to be read, not changed."""
        with self._lock:
            return self._latest

    def rows(self) -> list[dict[str, Any]]:
        """Every row kept, in order."""
        with self._lock:
            return list(self._rows)

    def frame(self) -> pd.DataFrame:
        with self._lock:
            rows = list(self._rows)
        return frame(rows)


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a DataFrame with typed columns (the known ones first)."""
    df = pd.DataFrame(rows, columns=None if rows else list(COLUMNS))
    for name, kind in COLUMNS.items():
        if name in df:
            df[name] = df[name].astype({int: "int64", float: "float64", bool: "bool", str: "object"}[kind])
    return df


def checked(step: Any, rows: Iterable[Any]) -> list[dict[str, Any]]:
    """``History.log_completions(step, rows)``'s rows with ``step``, or ``ValueError`` naming the first value the
    table cannot hold (``COLUMNS``' types, each one given and no other; a float may be None, for NaN; ``length`` >= 0):
    before anything is kept. A row's own ``step`` is the one given; a numpy or torch scalar is the value it holds."""
    step = checked_step("history.log_completions", step)
    rows = list(rows)
    plain = _plain(step, rows)
    if plain is not None:
        return plain
    batch = []
    for i, given in enumerate(rows):
        if isinstance(given, Mapping):  # numpy and torch scalars as what they hold (np.float32 rewards too)
            given = {k: scalar(v) for k, v in given.items()}
        bad: list[str] = _not_a_row(given) if isinstance(given, Mapping) else [f"{given!r} is not a dict"]
        line = None if bad else row({"step": step, **given} | {"step": step}, bad)
        if line is not None and (name := next((n for n in TEXTS if surrogate(line[n]) is not None), None)):
            bad.append(f"{name} holds a lone surrogate at position {surrogate(line[name])}: it is not valid Unicode")
            line = None
        if line is None:
            kinds = ", ".join(f"{name} {kind.__name__}" for name, kind in COLUMNS.items() if name != "step")
            problem = bad[0]
            raise ValueError(f"history.log_completions: rows[{i}]: {problem}; a row holds {kinds}"[:400])
        batch.append(line)
    return batch


def _plain(step: int, rows: list[Any]) -> list[dict[str, Any]] | None:
    """``checked``'s rows when each is a plain ``dict`` of exactly the columns but ``step``, each value of its column's
    exact type and range with valid Unicode texts (``completion_rows``' rows, and most of a user's), else None: the same
    checks as ``checked``'s, with no call a value (it runs for every completion of every step; a row that is anything
    else gets ``checked``'s every conversion and its error)."""
    batch = []
    for given in rows:
        if type(given) is not dict or given.keys() != _ROW:
            return None
        g, p, c, r = given["group"], given["prompt"], given["completion"], given["reward"]
        a, n, t = given["advantage"], given["length"], given["truncated"]
        if not (type(g) is int and -INT64 <= g < INT64 and type(n) is int and 0 <= n < INT64 and type(t) is bool
                and type(p) is str and type(c) is str and type(r) is float and type(a) is float):  # fmt: skip
            return None
        if not (p.isascii() and c.isascii()):  # a lone surrogate is no ASCII; encode finds one
            try:
                p.encode()
                c.encode()
            except UnicodeEncodeError:
                return None
        batch.append({"step": step, **given})
    return batch


def _not_a_row(given: Mapping[Any, Any]) -> list[str]:
    """What makes a given row no row of the table: a missing column (else kept as NaN), one it has not (else a column
    of its own) or a negative ``length``; ``row`` checks the types."""
    missing = [name for name in COLUMNS if name != "step" and name not in given]
    unknown = [name for name in given if name not in COLUMNS]
    length = given.get("length")
    return ([f"{missing[0]} missing"] if missing else [f"{unknown[0]!r} is no column"] if unknown
            else [f"length = {length!r} (tokens: >= 0)"] if fits_int64(length) and length < 0 else [])  # fmt: skip


def row(line: dict[str, Any], bad: list[str]) -> dict[str, Any] | None:
    """A completion from ``completions.jsonl``; one with a missing or mistyped column is left out."""
    for name, kind in COLUMNS.items():
        value = line.get(name)
        if kind is float and value is None:  # a null stands for NaN
            line = {**line, name: math.nan}
            continue
        ok = fits_int64(value) if kind is int else fits_float(value) if kind is float else isinstance(value, kind)
        if not ok:
            bad.append(f"{name} = {value!r}"[:80])
            return None
    return line


def _as_read(line: dict[str, Any]) -> dict[str, Any]:
    """A line of ``completions.jsonl`` with its float columns' ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` as the
    floats (``jsontext``; an older rlnb wrote them bare); its texts as written. Given rows are not read so: a reward
    of ``"NaN"`` passed to ``log_completions`` is refused as text."""
    return {k: number(v) if COLUMNS.get(k) is float else v for k, v in line.items()}


def read_completions(path: Path) -> list[dict[str, Any]]:
    """The completions of the run folder ``path`` (none when it has no ``completions.jsonl``); what cannot
    be read is left out with a warning."""
    bad: list[str] = []
    lines = (_as_read(line) for _, line in read_jsonl(path / COMPLETIONS_FILE))
    rows = [r for r in (row(line, bad) for line in lines) if r is not None]
    warn_bad(path / COMPLETIONS_FILE, bad)
    mended = [i for i, r in enumerate(rows) if any(surrogate(r[name]) is not None for name in TEXTS)]
    for i in mended:  # written before log_completions refused them: kept, with escapes
        rows[i] = {**rows[i], **{name: escaped(rows[i][name]) for name in TEXTS}}
    if mended:
        warnings.warn(f"{path / COMPLETIONS_FILE}: {len(mended)} completion(s) hold text that is not valid Unicode (a "
                      "lone surrogate): shown with escapes, such as \\udcff", RuntimeWarning, stacklevel=3)  # fmt: skip
    return rows


def completions(path: str | Path) -> pd.DataFrame:
    """The completions table of the run folder ``path``, without loading its operations (empty for a run of no RL
    step). A path that is no run folder is a ``FileNotFoundError``, as ``History.load`` says it: an empty table for a
    mistyped path would read as if the run had sampled nothing."""
    folder = user_path("path", path)
    if not (folder / OPS_FILE).exists():
        raise FileNotFoundError(f"{folder} is not an rlnb run folder (no {OPS_FILE}): give the folder History.load "
                                "takes, such as rlnb-runs/<run id>")  # fmt: skip
    return frame(read_completions(folder))
