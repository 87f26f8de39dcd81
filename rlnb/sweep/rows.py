"""A sweep folder's ``trials.jsonl``: one line per finished trial, flushed at once, read back on resume (each line
that is no trial's row, or whose config was edited, warned about), and the table ``sweep`` returns from its rows.

Standard JSON, as a run folder's files are (``history.jsontext``: a NaN loss is ``"NaN"``; an older rlnb's bare
``NaN`` still reads), appended never through a link (``_files``)."""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb._files import appending, no_follow, refuse_link, refuse_pipe, refuse_shared
from rlnb.errors import InvalidParams
from rlnb.history.jsontext import line, number
from rlnb.history.reading import loads
from rlnb.params import OptimizerParams, kind_of

from .applying import apply
from .trial import METRIC_COLUMNS, RESULT_COLUMNS, TERMINAL, Objective

ROWS_FILE = "trials.jsonl"


def append_row(folder: Path, row: dict[str, Any]) -> None:
    """One finished trial's row, on disk before anyone is told about it; its ``run_path`` relative to the sweep
    folder (an absolute one would name the folder where it ran: moved, the table would point at nothing, copied, at
    the original's runs)."""
    path = row.get("run_path")
    if path and Path(path).is_relative_to(folder):
        row = {**row, "run_path": Path(path).relative_to(folder).as_posix()}
    with appending(folder / ROWS_FILE) as fh:  # its rows went into a link's target (a sweep folder from elsewhere)
        fh.write(line(row))  # a FAILED trial's NaN loss as "NaN": jq, DuckDB refused NaN


def run_path(folder: Path, recorded: Any) -> str | None:
    """A row's ``run_path`` where the folder is now: a relative one under ``folder``; an absolute one (written by an
    rlnb before relative paths, or in memory) there too when ``folder`` holds a run of its name (the folder was moved
    or copied since), else as written."""
    if not isinstance(recorded, str) or not recorded:
        return None
    path = Path(recorded)
    if not path.is_absolute():
        return str(folder / path)
    return str(folder / path.name) if (folder / path.name).is_dir() else recorded


def read_rows(folder: Path, search: bool = False) -> list[dict[str, Any]]:
    """The rows ``trials.jsonl`` holds, each line that is no trial's row skipped with a warning naming it and what
    the resume does with its trial (``search``: an Optuna search's study holds it, so it is not run again)."""
    skipped = ("skipped (the Optuna study holds its trial: it is not run again unless it was stopped, and the table "
               "lacks its row)" if search else "skipped, so its trial runs again")  # fmt: skip
    rows_path = folder / ROWS_FILE
    refuse_link(rows_path)  # before any trial runs: each row would be appended through it
    refuse_pipe(rows_path)  # reading one waited for ever
    try:  # never through a link, nor a pipe swapped in after the checks (``no_follow``)
        rows_file = open(rows_path, "rb", opener=no_follow)  # noqa: SIM115 - closed below, or by refuse_shared
    except FileNotFoundError:
        return []
    except IsADirectoryError:  # bare, as sweep.json's was
        raise IsADirectoryError(
            f"resume: {rows_path} is a folder, not a file: it must hold the rows of the sweep's "
            "finished trials; move it away to run them all again, or start a new sweep"
        ) from None
    refuse_shared(rows_file, rows_path)  # each row would be appended into the other name's file too
    with rows_file:
        data = rows_file.read()
    rows = []
    for n, raw in enumerate(data.splitlines(), 1):
        try:  # a line edited by hand in another encoding ended the resume with a bare UnicodeDecodeError
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            warnings.warn(f"{rows_path} line {n} is not UTF-8 text; {skipped}: {raw[:80]!r}", stacklevel=4)
            continue
        try:
            row = loads(text)  # a run folder's reader: nested past the decoder (RecursionError) is not JSON either
        except ValueError:  # a half-written last line of a killed sweep, or a hand edit: was skipped silently
            warnings.warn(f"{rows_path} line {n} is not JSON (a row cut short by a killed sweep, or edited); "
                          f"{skipped}: {text[:80]!r}", stacklevel=4)  # fmt: skip
            continue
        if _is_row(row):  # its numbers' "NaN" / "Infinity" as the floats; text (a label "NaN") as written
            row = _inside(folder, f"{rows_path} line {n}", row)
            rows.append(_numbers(f"{rows_path} line {n}", {k: number(v) if k in METRIC_COLUMNS else v
                                                            for k, v in row.items()}))  # fmt: skip
        else:  # a line edited by hand: a KeyError ('status') ended the resume
            warnings.warn(f"{rows_path} line {n} is not a trial's row (an object with an integer 'trial' and a "
                          f"'status' of {', '.join(TERMINAL)}); skipped: {text[:80]!r}", stacklevel=4)  # fmt: skip
    return rows


def planned_rows(
    folder: Path, rows: list[dict[str, Any]], expected: Callable[[int], dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """The rows of trials this sweep has, each with the number, variant, label, config and seed ``expected`` gives
    it. Another trial's row (a hand edit: ``{"trial": 99, ...}``) is left out with a warning: it would be a row of
    the table with no config, and count done ("done 5 of 4"). A planned trial's row that says otherwise (a config
    edited by hand) is warned about, field by field, and takes the plan's: the plan is what the trial ran with,
    and the table would show its result beside the edited config, silently."""
    kept = []
    for trial in sorted({r["trial"] for r in rows if expected(r["trial"]) is None}):
        warnings.warn(f"{folder / ROWS_FILE}: trial {trial} is not a trial of this sweep; its row is ignored",
                      stacklevel=3)  # fmt: skip
    for row in rows:
        plan = expected(row["trial"])
        if plan is not None:
            kept.append(_as_planned(folder, row, json.loads(json.dumps(plan, default=str))))  # as it was written
    return kept


def _as_planned(folder: Path, row: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the plan's identifying columns, warning about each that differs (or that the plan lacks)."""
    extra = [k for k in row if k not in plan and k not in RESULT_COLUMNS]  # a config field added by hand
    differ = [f"{k}: {row.get(k)!r} (the plan has {plan[k]!r})" for k in plan if not json_equal(row.get(k), plan[k])]
    differ += [f"{k}: {row[k]!r} (the plan has no {k})" for k in extra]
    if not differ:
        return row
    warnings.warn(f"{folder / ROWS_FILE}: trial {row['trial']}'s row differs from the sweep's plan (edited by hand?) "
                  f"in {'; '.join(differ)}; the plan's is kept, as the trial ran with it", stacklevel=4)  # fmt: skip
    return {**{k: v for k, v in row.items() if k not in extra}, **plan}


def _inside(folder: Path, where: str, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without a ``run_path`` that leads out of the sweep folder (``../elsewhere``, or ``/etc`` where the
    folder holds no run ``etc``: a damaged or hostile file would make the table and ``histories`` read a run elsewhere),
    warned about. An absolute one an older rlnb wrote is kept: inside the folder, or its name a run there (the
    folder moved since: ``run_path``)."""
    recorded = row.get("run_path")
    if not isinstance(recorded, str):
        return row
    path = Path(os.path.normpath(recorded))
    if path.is_absolute():
        if path.is_relative_to(os.path.normpath(folder)) or path.name and (folder / path.name).is_dir():
            return row
    elif path.parts[:1] != ("..",):
        return row
    warnings.warn(f"{where}: trial {row['trial']}'s run_path {recorded[:200]!r} leads out of the sweep folder "
                  "(edited by hand?); read as no run", stacklevel=5)  # fmt: skip
    return {**row, "run_path": None}


def json_equal(a: Any, b: Any) -> bool:
    """``a == b`` for values read from JSON, where ``true`` is no ``1`` (Python's ``True == 1`` let ``"steps": true``
    resume a sweep of one step, and a row's ``"seed": true`` pass for seed 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    return bool(a == b)


def _numbers(where: str, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each result that is no number (``"final_reward": "0.9x"``, a list: a hand edit) as NaN, warned
    about: the table's float columns would refuse it with pandas' bare "could not convert string to float" once every
    trial left had run, and the resumed sweep's table be lost. A ``true`` is no number either: ``diverged_at`` would
    read it as step 1."""
    bad = [k for k in (*METRIC_COLUMNS, "diverged_at") if not (row.get(k) is None or type(row[k]) in (int, float))]
    if bad:
        warnings.warn(f"{where}: trial {row['trial']}'s {', '.join(f'{k} {row[k]!r}'[:80] for k in bad)} is no number "
                      "(edited by hand?); read as NaN", stacklevel=5)  # fmt: skip
    return row | dict.fromkeys(bad, math.nan)


def _is_row(row: Any) -> bool:
    trial = row.get("trial") if isinstance(row, dict) else None
    return isinstance(trial, int) and not isinstance(trial, bool) and trial >= 0 and row.get("status") in TERMINAL


def table(rows: list[dict[str, Any]], folder: Path, objective: Objective, superseded: set[int]) -> pd.DataFrame:
    """What ``sweep`` returns: the latest row of each trial (a trial run again after a stop replaces
    its STOPPED row; an Optuna trial asked again under a new number, ``superseded``, leaves), by trial number."""
    latest = {r["trial"]: r for r in rows if r["trial"] not in superseded}
    ordered = [latest[n] for n in sorted(latest)]
    # an Optuna search stopped before its first trial has no row: a table without columns, which summarize refused
    out = pd.DataFrame(ordered, columns=_columns(ordered) if latest else ["trial", "label", "seed", "status"])
    for col in ("final_loss", "best_loss", "final_reward", "best_reward", "value", "wall_s"):
        # always there: a sweep whose every trial stopped before it started lacked them, and summarize, ablate
        # and search_plot then raised (ablate losing its table)
        out[col] = out[col].astype(float) if col in out else math.nan
    for col in ("steps_done", "diverged_at"):  # step counts: 3, not 3.0 beside NaN (a fraction typed in: float)
        counts = pd.to_numeric(out[col], errors="coerce") if col in out else pd.Series(math.nan, index=out.index)
        out[col] = counts.astype("Int64") if (counts.dropna() % 1 == 0).all() else counts
    out["run_path"] = [run_path(folder, p) for p in out["run_path"]] if "run_path" in out else None
    out.attrs.update(path=str(folder), objective=objective)
    return out


def ran_with(rows: list[dict[str, Any]], base: OptimizerParams) -> list[dict[str, Any]]:
    """``rows`` with each config field another row's config sets filled in with the value the trial ran with: the
    base's, else its optimizer's default. A config records only what it sets, so an ablation's baseline had NaN for
    the rate its variants change: ``search_plot`` drew none of its rows (its star at NaN) and ``summarize`` showed NaN
    for it. A field the trial's optimizer lacks (Muon's ``momentum`` on an Adam trial) stays unset."""
    fields = list(dict.fromkeys(k for row in rows for k in row if k not in RESULT_COLUMNS))
    return [_ran_with(row, fields, base) for row in rows]


def _ran_with(row: dict[str, Any], fields: list[str], base: OptimizerParams) -> dict[str, Any]:
    gaps = [k for k in fields if row.get(k) is None]
    if not gaps:
        return row
    try:
        params = apply(base, {k: row[k] for k in fields if row.get(k) is not None})
    except (InvalidParams, ValueError):  # a row edited by hand: shown as it is
        return row
    resolved = params.resolved()
    filled = dict(row)
    for key in gaps:
        head, _, sub = key.partition(".")
        value = kind_of(params) if key == "optimizer" else getattr(resolved, head, None)
        value = getattr(value, sub, None) if sub else value
        if value is not None:
            filled[key] = value
    return filled


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """The table's columns as ``searched`` reads them: trial, variant, label, the config's fields in the plan's order
    (as the trials by number first name them), seed, then the results. Taken from the rows in the order they finished,
    the config that failed first led (``search_plot``'s x and ``summarize``'s first key changed with the executor)."""
    named = list(dict.fromkeys(k for row in rows for k in row))
    head = [k for k in ("trial", "variant", "label") if k in named]
    config = [k for k in named if k not in RESULT_COLUMNS]
    results = [k for k in named if k in RESULT_COLUMNS and k not in head and k != "seed"]
    return [*head, *config, *(["seed"] if "seed" in named else []), *results]
