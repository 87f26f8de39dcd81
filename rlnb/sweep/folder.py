"""The sweep folder: ``sweep.json`` (the arguments), ``trials.jsonl`` (one line per finished trial,
flushed at once), one run folder per trial, and for Optuna ``study.db``. What makes a sweep resumable."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb.history import default_runs_dir, new_run_id
from rlnb.params import OptimizerParams
from rlnb.tasks import Task

from .options import SearchOptions, TrialOptions
from .trial import Objective

SETTINGS_FILE, ROWS_FILE = "sweep.json", "trials.jsonl"


def append_row(folder: Path, row: dict[str, Any]) -> None:
    """One finished trial's row, on disk before anyone is told about it."""
    with open(folder / ROWS_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=str) + "\n")


def new_folder(runs_dir: str | Path | None) -> Path:
    folder = (Path(runs_dir).expanduser() if runs_dir is not None else default_runs_dir()) / new_run_id("sweep")
    folder.mkdir(parents=True)
    return folder


def settings(
    base: OptimizerParams,
    configs: Sequence[Mapping[str, Any]] | None,
    trial: TrialOptions,
    study: SearchOptions,
    task: Task,
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
        "target": trial.target,
    }


def begin(folder: Path, settings: dict[str, Any], resume: bool) -> list[dict[str, Any]]:
    """Write the settings of a new sweep, or check a resumed one's; return the rows recorded so far."""
    path = folder / SETTINGS_FILE
    if not resume:
        path.write_text(json.dumps(settings, indent=2, default=str))
        return []
    if not path.exists():
        raise FileNotFoundError(f"resume: {folder} is not a sweep folder (no {SETTINGS_FILE})")
    stored = json.loads(path.read_text())
    now = json.loads(json.dumps(settings, default=str))
    changed = [f"{k}: {now.get(k)!r} (the sweep used {stored.get(k)!r})" for k in now if now.get(k) != stored.get(k)]
    if changed:
        raise ValueError("resume: run it with the same arguments; changed: " + "; ".join(changed))
    rows_path = folder / ROWS_FILE
    if not rows_path.exists():
        return []
    rows = []
    for line in rows_path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a half-written last line of a killed sweep: that trial runs again
    return rows


def trial_run_id(folder: Path, trial: int, seed: int) -> str:
    """``trial-007-seed0``; a trial run again after a stop gets ``-r2``, ``-r3``, ... (never mixed with the old)."""
    run_id, attempt = f"trial-{trial:03d}-seed{seed}", 1
    while (folder / run_id).exists():
        attempt += 1
        run_id = f"trial-{trial:03d}-seed{seed}-r{attempt}"
    return run_id


def table(rows: list[dict[str, Any]], folder: Path, objective: Objective) -> pd.DataFrame:
    """What ``sweep`` returns: the latest row of each trial (a trial run again after a stop replaces
    its STOPPED row), by trial number."""
    latest = {r["trial"]: r for r in rows}
    out = pd.DataFrame(list(latest.values()))
    if len(out):
        out = out.sort_values("trial", ignore_index=True)
        for col in ("final_loss", "best_loss", "final_reward", "best_reward", "value", "wall_s"):
            if col in out:
                out[col] = out[col].astype(float)
    out.attrs.update(path=str(folder), objective=objective)
    return out
