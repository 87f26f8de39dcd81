"""The sweep folder: ``sweep.json`` (the arguments), ``trials.jsonl`` (one line per finished trial,
flushed at once), one run folder per trial, and for Optuna ``study.db``. What makes a sweep resumable.

Both files are standard JSON, as a run folder's are (``history.jsontext``: a NaN loss is ``"NaN"``; an older
rlnb's bare ``NaN`` still reads), and are written as a run folder's files are: never through a link (``locks``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pandas as pd

from rlnb._options import refuse_dangling_link
from rlnb.history import default_runs_dir, new_run_id
from rlnb.history.jsontext import config_text, line, number, spelled
from rlnb.history.locks import (
    appending,
    hold_lock,
    no_follow,
    refuse_link,
    refuse_pipe,
    refuse_shared,
    regular,
    release,
    write_new,
)
from rlnb.history.reading import loads
from rlnb.params import OptimizerParams
from rlnb.tasks import Task

from .fingerprint import task_detail
from .options import SearchOptions, TrialOptions
from .trial import METRIC_COLUMNS, RESULT_COLUMNS, TERMINAL, Objective

SETTINGS_FILE, ROWS_FILE, LOCK_FILE = "sweep.json", "trials.jsonl", "sweep.lock"
RESULT_OPTIONS = frozenset(
    {"model", "base_model", "dtype", "lora", "muon_scaling", "muon_split", "ns_dtype", "sampling_seed", "eos_token_id",
     "tokenizer", "resume_from", "resume_from_checkpoint_id", "load_optimizer", "model_options", "muon_options"}
)  # fmt: skip
"""The ``rlnb.connect`` options that change what a trial computes, recorded in ``sweep.json`` so that a resume
with others is refused (``muon_scaling="match_adam"`` on resume ran the rest of an "original" sweep in other
units, in one table). Keys, sinks, timeouts, threads and the like may differ on resume."""


def append_row(folder: Path, row: dict[str, Any]) -> None:
    """One finished trial's row, on disk before anyone is told about it; its ``run_path`` relative to the sweep
    folder (an absolute one named the folder where it ran: moved, the table pointed at nothing, copied, at the
    original's runs)."""
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


def new_folder(runs_dir: str | Path | None) -> Path:
    root = Path(runs_dir).expanduser() if runs_dir is not None else default_runs_dir()
    refuse_dangling_link("runs_dir", root)  # mkdir said "[Errno 17] File exists", naming no argument
    folder = root.absolute() / new_run_id("sweep")
    try:
        folder.mkdir(parents=True)
    except NotADirectoryError:  # a bare "[Errno 20] Not a directory: '<file>/<sweep id>'" named no argument
        given = "runs_dir" if runs_dir is not None else f"the default runs_dir ({root})"
        raise NotADirectoryError(f"{given} must be a folder (or where one can be made), but {root} is a file or "
                                 "lies under one") from None  # fmt: skip
    return folder


def lock(folder: Path, resume: bool) -> IO[str]:
    """Hold the folder's ``sweep.lock`` for the sweep's life (the OS releases it if the process dies), or raise
    ``RunLocked`` naming the holder. Two sweeps resumed on one folder both ran its unfinished trials, and the
    second's rows (FAILED: each trial's run folder was the first's) were recorded after, and over, the first's."""
    if resume:  # a link to nothing was "not a sweep folder (no sweep.json)", not naming the link
        refuse_dangling_link("resume", folder)
    if resume and not (folder / SETTINGS_FILE).exists():
        raise FileNotFoundError(f"resume: {folder} is not a sweep folder (no {SETTINGS_FILE})")
    busy = f"sweep folder {folder} is being run by another sweep (pid {{holder}}): let it finish, or stop it, "
    return hold_lock(folder / LOCK_FILE, busy + "before resuming it")


@contextlib.contextmanager
def held(folder: Path, resume: bool) -> Iterator[dict[str, bool]]:
    """``lock`` for the sweep's life. A new folder is removed after unless the sweep marks it ``started`` once its
    executors are up: Ray refused (not installed, unreachable, too small) left an empty sweep folder behind."""
    state = {"started": resume}
    fh = lock(folder, resume)
    try:
        yield state
    finally:
        release(fh)  # unlocked first: a DataLoader worker forked meanwhile held it on after a close
        if not state["started"]:  # nothing ran: sweep.json and the lock only
            shutil.rmtree(folder, ignore_errors=True)


def _settings_text(path: Path) -> str:
    """A resumed sweep's ``sweep.json``, read; what is no file there refused naming ``resume``, as its other
    refusals are (a folder there raised a bare ``IsADirectoryError``)."""
    try:
        refuse_pipe(path)  # reading one waited for ever
        with open(path, encoding="utf-8", opener=regular) as fh:  # a pipe swapped in after the check: refused
            return fh.read()
    except IsADirectoryError:
        raise IsADirectoryError(f"resume: {path} is a folder, not a file: it must record the sweep's arguments, so "
                                "this folder cannot be resumed") from None  # fmt: skip
    except OSError as exc:
        if exc.errno is None:  # refuse_pipe's or regular's refusal, worded without the argument
            raise OSError(f"resume: {exc}") from None
        raise


def settings(
    base: OptimizerParams,
    configs: Sequence[Mapping[str, Any]] | None,
    trial: TrialOptions,
    study: SearchOptions,
    task: Task,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """What ``sweep.json`` records of the sweep (a resume must be given the same)."""
    searching = study.search is not None
    return {
        "search": study.search,
        "base": base.request_body(),
        "configs": [dict(c) for c in configs] if configs is not None else None,
        "space": {k: repr(v) for k, v in (study.space or {}).items()},
        "sampler": study.sampler if searching and isinstance(study.sampler, str) else None,
        "pruner": study.pruner if searching and (study.pruner is None or isinstance(study.pruner, str)) else None,
        "objective": trial.objective,
        "seeds": list(trial.seeds),
        "steps": trial.steps,
        "task": task.name,
        "task_detail": task_detail(task),
        "target": trial.target,
        "schedule": _plain(trial.schedule),
        "options": {k: _plain(v) for k, v in sorted(options.items()) if k in RESULT_OPTIONS},
    }


def _plain(value: Any) -> Any:
    """A setting as JSON can compare it: a plain value as is, a dataclass (a ``Schedule``, an option group) by its
    fields, any other object (an ``nn.Module``) by its type: it is made anew for each call."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return f"<{type(value).__name__}>"


def begin(
    folder: Path, settings: dict[str, Any], resume: bool, same: Mapping[str, Callable[[Any], bool]] | None = None
) -> list[dict[str, Any]]:
    """Write the settings of a new sweep, or check a resumed one's; return the rows recorded so far. ``same``: for a
    setting compared by what it means, not its text (the space), whether the stored one is the same."""
    path = folder / SETTINGS_FILE
    if not resume:  # written then renamed: never through a link planted at either name
        write_new(folder / (SETTINGS_FILE + ".tmp"), config_text(settings).encode("utf-8"))
        (folder / (SETTINGS_FILE + ".tmp")).replace(path)
        return []
    try:  # a sweep killed while writing it left it empty or cut short: a bare JSONDecodeError named no file
        stored = spelled(loads(_settings_text(path)))  # an older rlnb's bare NaN as it is written now
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"resume: {path} is damaged ({exc}); it records the sweep's arguments, so this folder "
                         "cannot be resumed: start a new sweep") from exc  # fmt: skip
    if not isinstance(stored, dict):  # a list or null: `k in stored` compared nothing, or raised a TypeError
        raise ValueError(f"resume: {path} is not a sweep's settings (a JSON object), got {type(stored).__name__}")
    now = json.loads(config_text(settings))  # as written: a NaN setting is "NaN" on both sides (NaN != NaN)
    # a key the stored settings lack was not recorded by the rlnb that made the folder: nothing to compare
    differs = {
        k for k in now if k in stored and now[k] != stored[k] and not (same and k in same and same[k](stored[k]))
    }
    changed = [f"{k}: {now[k]!r} (the sweep used {stored[k]!r})" for k in now if k in differs]
    if changed:
        raise ValueError("resume: run it with the same arguments; changed: " + "; ".join(changed))
    rows_path = folder / ROWS_FILE
    refuse_link(rows_path)  # before any trial runs: each row would be appended through it
    refuse_pipe(rows_path)  # reading one waited for ever
    try:  # never through a link, nor a pipe swapped in after the checks (``no_follow``)
        rows_file = open(rows_path, "rb", opener=no_follow)  # noqa: SIM115 - closed below, or by refuse_shared
    except FileNotFoundError:
        return []
    refuse_shared(rows_file, rows_path)  # each row would be appended into the other name's file too
    with rows_file:
        data = rows_file.read()
    rows = []
    for n, raw in enumerate(data.splitlines(), 1):
        try:  # a line edited by hand in another encoding ended the resume with a bare UnicodeDecodeError
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            warnings.warn(f"{rows_path} line {n} is not UTF-8 text; skipped: {raw[:80]!r}", stacklevel=3)
            continue
        try:
            row = loads(text)  # a run folder's reader: nested past the decoder (RecursionError) is not JSON either
        except ValueError:  # a half-written last line of a killed sweep, or a hand edit: was skipped silently
            warnings.warn(f"{rows_path} line {n} is not JSON (a row cut short by a killed sweep, or edited); skipped, "
                          f"so its trial runs again: {text[:80]!r}", stacklevel=3)  # fmt: skip
            continue
        if _is_row(row):  # its numbers' "NaN" / "Infinity" as the floats; text (a label "NaN") as written
            rows.append(_numbers(f"{rows_path} line {n}", {k: number(v) if k in METRIC_COLUMNS else v
                                                            for k, v in row.items()}))  # fmt: skip
        else:  # a line edited by hand: a KeyError ('status') ended the resume
            warnings.warn(f"{rows_path} line {n} is not a trial's row (an object with an integer 'trial' and a "
                          f"'status' of {', '.join(TERMINAL)}); skipped: {text[:80]!r}", stacklevel=3)  # fmt: skip
    return rows


def planned_rows(
    folder: Path, rows: list[dict[str, Any]], expected: Callable[[int], dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """The rows of trials this sweep has, each with the number, variant, label, config and seed ``expected`` gives
    it. Another trial's row (a hand edit: ``{"trial": 99, ...}``) is left out with a warning: it was a row of the
    table with no config, and counted done ("done 5 of 4"). A planned trial's row that says otherwise (a config
    edited by hand) is warned about, field by field, and takes the plan's: the plan is what the trial ran with,
    and the table showed its result beside the edited config, silently."""
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
    differ = [f"{k}: {row.get(k)!r} (the plan has {plan[k]!r})" for k in plan if row.get(k) != plan[k]]
    differ += [f"{k}: {row[k]!r} (the plan has no {k})" for k in extra]
    if not differ:
        return row
    warnings.warn(f"{folder / ROWS_FILE}: trial {row['trial']}'s row differs from the sweep's plan (edited by hand?) "
                  f"in {'; '.join(differ)}; the plan's is kept, as the trial ran with it", stacklevel=4)  # fmt: skip
    return {**{k: v for k, v in row.items() if k not in extra}, **plan}


def _numbers(where: str, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each result that is no number (``"final_reward": "0.9x"``, a list: a hand edit) as NaN, warned
    about: the table's float columns refused it with pandas' bare "could not convert string to float" once every
    trial left had run, and the resumed sweep's table was lost."""
    bad = [k for k in METRIC_COLUMNS if not (row.get(k) is None or type(row[k]) in (int, float))]
    if bad:
        warnings.warn(f"{where}: trial {row['trial']}'s {', '.join(f'{k} {row[k]!r}'[:80] for k in bad)} is no number "
                      "(edited by hand?); read as NaN", stacklevel=4)  # fmt: skip
    return row | dict.fromkeys(bad, math.nan)


def _is_row(row: Any) -> bool:
    trial = row.get("trial") if isinstance(row, dict) else None
    return isinstance(trial, int) and not isinstance(trial, bool) and trial >= 0 and row.get("status") in TERMINAL


def trial_run_id(folder: Path, trial: int, seed: int) -> str:
    """``trial-007-seed0``; a trial run again after a stop gets ``-r2``, ``-r3``, ... (never mixed with the old)."""
    run_id, attempt = f"trial-{trial:03d}-seed{seed}", 1
    while (folder / run_id).exists():
        attempt += 1
        run_id = f"trial-{trial:03d}-seed{seed}-r{attempt}"
    return run_id


def table(rows: list[dict[str, Any]], folder: Path, objective: Objective, superseded: set[int]) -> pd.DataFrame:
    """What ``sweep`` returns: the latest row of each trial (a trial run again after a stop replaces
    its STOPPED row; an Optuna trial asked again under a new number, ``superseded``, leaves), by trial number."""
    latest = {r["trial"]: r for r in rows if r["trial"] not in superseded}
    # an Optuna search stopped before its first trial has no row: a table without columns, which summarize refused
    out = pd.DataFrame(list(latest.values()), columns=None if latest else ["trial", "label", "seed", "status"])
    out = out.sort_values("trial", ignore_index=True)
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
