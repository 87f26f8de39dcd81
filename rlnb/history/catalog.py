"""Many runs at once: ``runs()`` lists a folder of run folders, ``compare()`` stacks their steps tables.

A run that cannot be read is a row with its ``error``, never a failure of the whole listing.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlnb import wire
from rlnb._input.checks import user_path
from rlnb.history.figures import SHADOWED, STEP_COLUMNS
from rlnb.history.history import History
from rlnb.history.listing import listed
from rlnb.history.paths import default_runs_dir
from rlnb.history.runconfig import is_time, session_starts
from rlnb.history.steplog import StepLog
from rlnb.history.store import CONFIG_FILE, OPS_FILE, holds_run
from rlnb.text.prompts import escaped, surrogate

COLUMNS = [
    "run_id",
    "path",
    "created_at",
    "backend",
    "model",
    "optimizer",
    "seed",
    "operations",
    "failed",
    "steps",
    "final_loss",
    "error",
]


LOST_FOUND = "lost+found"
"""A file system's own folder at its root (root's, mode 700): never a run, so not listed when it cannot be looked into,
as another user's private run folder is (with its ``error``)."""
ADDED = ("run", "seed")
"""The columns ``compare`` adds to the steps tables: a figure logged under one of these names is ``"run (logged)"``."""


def _row(run: Path) -> dict[str, Any]:
    """One run's summary; ``error`` says why a run could not be summarised (the rest is then missing). It is what
    ``History.load`` gives (``steps`` its steps table's, as fed from the same records), read without what the
    listing does not show (``listing.listed``)."""
    try:
        folder = listed(run)
        cfg = folder.config
        log = StepLog()
        log.feed(folder.records, (), unfinished=False, sessions=session_starts(cfg))
        steps = log.frame()
        created = cfg.get("created_at")
        return {
            "run_id": str(cfg.get("run_id") or run.name),
            "path": str(run),
            "created_at": pd.to_datetime(created, unit="s", utc=True) if is_time(created) else pd.NaT,
            "backend": cfg.get("backend"),
            "model": cfg.get("model"),
            "optimizer": cfg.get("optimizer"),
            "seed": cfg.get("seed"),
            "operations": len(folder.records),
            "failed": sum(r.status == wire.OperationStatus.FAILED for r in folder.records),
            "steps": int(steps.step.max()) if len(steps) else 0,
            "final_loss": float(steps.loss.iloc[-1]) if len(steps) else math.nan,
            "error": None,
        }
    except Exception as exc:  # noqa: BLE001 - one bad run is a row, not the end of the listing
        return {"run_id": run.name, "path": str(run), "created_at": pd.NaT, "error": f"{type(exc).__name__}: {exc}"}


def runs(path: str | Path | None = None) -> pd.DataFrame:
    """The runs under a folder (default ``./rlnb-runs``), newest first, one row each. A run that cannot be
    read is listed with its ``error`` (None for the others), and so is a folder that cannot be looked into (another
    user's run), except ``lost+found``, a file system's own. The default folder missing is an empty listing (a
    notebook listing its runs before the first); a folder named that is missing is a ``FileNotFoundError`` naming
    it, as ``completions`` and ``History.load`` say of theirs: a mistyped name listed no runs, as if none were there."""
    if path == "":  # Path("") is the working folder: an unset variable listed it (connect's runs_dir refuses '')
        raise ValueError("runs: path must be a runs folder's path or None (./rlnb-runs), got ''")
    root = user_path("path", path) if path is not None else default_runs_dir()
    if path is not None and not root.exists():
        raise FileNotFoundError(f"runs: no folder {str(root)!r} (from {str(Path.cwd())!r}): give the runs folder a "
                                "session's runs_dir= named, or rlnb.runs() for the default one")  # fmt: skip
    if root.exists() and not root.is_dir():  # a bare NotADirectoryError from iterdir()
        raise ValueError(f"runs: path {str(root)!r} is a file, not a runs folder")
    if (root / OPS_FILE).exists():  # a run folder itself listed no runs
        raise ValueError(
            f"runs: {str(root)!r} is a run folder, not a folder of runs: History.load({str(root)!r}) "
            f"reads it, rlnb.runs({str(root.parent)!r}) lists it with its neighbours"
        )
    found = sorted(p for p in root.iterdir() if holds_run(p, unreadable=p.name != LOST_FOUND)) if root.exists() else []
    frame = pd.DataFrame([_shown(_row(run)) for run in found], columns=COLUMNS)
    frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
    errors = [e if isinstance(e, str) else None for e in frame["error"]]
    frame["error"] = pd.Series(errors, index=frame.index, dtype=object)  # None, not NaN, for the others
    return frame.sort_values("created_at", ascending=False, ignore_index=True, na_position="last")


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each text that is no valid Unicode shown with escapes (``'r\\udcff'``), its ``error`` saying so:
    a folder named in another encoding (copied from another system) is listed with lone surrogates, which the table's
    text columns refuse, and the whole listing failed with a ``UnicodeEncodeError``."""
    bad = [key for key, value in row.items() if isinstance(value, str) and surrogate(value) is not None]
    for key in bad:
        row[key] = escaped(row[key])
    if bad:
        said = f"{' and '.join(bad)} not valid Unicode text (a folder name in another encoding?): shown with escapes; "
        row["error"] = said + (row.get("error") or "rename the folder to load it by this path")
    return row


def compare(histories: Iterable[History | str | Path], labels: Sequence[str] | None = None) -> pd.DataFrame:
    """Several runs' ``steps`` tables stacked, with ``run`` (label) and ``seed`` columns, ready for
    ``plots.compare`` or a pivot (``df.pivot(index="step", columns="run", values="loss")``).

    A run's label is ``labels[i]``, else its config's ``label`` or ``run_id``, led by its ``variant`` where it has one
    (``ablate``'s runs: ``"a (learning_rate=0.001)"``). Runs that share a label and
    differ in seed are one configuration's seeds (``plots.compare`` draws their mean and band); two runs with
    the same label and seed would merge into one line, so a derived label takes its runs folder's name
    (``"adam-lo/trial"``), and where that is one folder its place in the list too (``"runs/adam (1)"``); given
    ``labels`` that collide so are refused. A config ``seed`` that is no integer is left out with a warning."""
    given = _runs_given(histories)
    if isinstance(labels, str):  # "ab" labelled two runs a and b; one label for every run: [label] * len(runs)
        raise TypeError(f"labels must be a list, one label per run, got the str {labels!r}"[:300])
    runs = [h if isinstance(h, History) else History.load(h) for h in given]
    where = [h.path if isinstance(h, History) else Path(h) for h in given]
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"labels has {len(labels)} entries for {len(runs)} runs: give one label per run")
    names = [_label(labels[i] if labels is not None else _named(h.config, i), path) for i, (h, path) in
             enumerate(zip(runs, where, strict=True))]  # fmt: skip
    seeds = [_seed(h, path) for h, path in zip(runs, where, strict=True)]
    keys = list(zip(names, seeds, strict=True))
    clash = {k for k in keys if keys.count(k) > 1}
    if clash and labels is not None:
        label, seed = sorted(clash, key=str)[0]
        raise ValueError(
            f"runs {[i for i, k in enumerate(keys) if k == (label, seed)]} share label {label!r} and "
            f"seed {seed}: they would be one line; give them different labels"
        )
    for i, path in enumerate(where):
        if keys[i] in clash:  # the same run_id in two runs folders: say which folder
            names[i] = f"{path.parent.name}/{names[i]}" if path is not None else f"{names[i]} ({i})"
    keys = list(zip(names, seeds, strict=True))
    for i, key in enumerate(keys):  # still one line (one folder, one label and seed): the run's place in the list
        if keys.count(key) > 1:
            names[i] = f"{names[i]} ({i})"
    frames = []
    for name, seed, h in zip(names, seeds, runs, strict=True):
        frame = with_logged_only(h.steps, h.logged).rename(columns={c: SHADOWED.format(c) for c in ADDED})
        frame.insert(0, "run", name)
        frame.insert(1, "seed", seed)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run", "seed", "step"])


def _runs_given(histories: object) -> list[History | str | Path]:
    """``histories`` as a list, or a ``TypeError`` naming what is no run: ``compare("rlnb-runs/a")`` loaded each
    character as a run folder ("r is not an rlnb run folder"), a History or a Path alone was "not iterable"."""
    if isinstance(histories, str | bytes | os.PathLike | History) or not isinstance(histories, Iterable):
        raise TypeError(f"compare takes a list of runs (Histories or run folders), such as [h1, 'rlnb-runs/b'], got "
                        f"{type(histories).__name__}: {histories!r}; one run alone: [run]"[:300])  # fmt: skip
    given = list(histories)
    for i, run in enumerate(given):
        if not isinstance(run, History | str | os.PathLike):
            raise TypeError(f"histories[{i}] must be a History or a run folder, got {type(run).__name__}: "
                            f"{run!r}"[:300])  # fmt: skip
    return given


def with_logged_only(steps: pd.DataFrame, logged: pd.DataFrame) -> pd.DataFrame:
    """``steps`` with a row for each step figures were logged at and no optim-step reached (an accuracy logged at step
    0, before training: the baseline on a comparison's plot; a run that only logged), placed before the first row of
    a later step: its figures (the last of each), NaN elsewhere. The other rows as they were."""
    if "step" not in logged or logged.empty:
        return steps
    alone = logged[~logged["step"].isin(steps["step"])]
    if alone.empty:
        return steps
    extra = alone.groupby("step", sort=True).last().reset_index()  # last non-NaN value of each figure per step
    extra = extra.rename(columns={c: SHADOWED.format(c) for c in STEP_COLUMNS if c != "step"})  # as ``steps`` names
    reached = steps["step"].to_numpy()
    at = [int(np.argmax(later)) if (later := reached > step).any() else len(steps) for step in extra["step"]]
    order = np.argsort(np.concatenate([np.arange(len(steps)) * 2 + 1, np.array(at) * 2]), kind="stable")
    both = pd.concat([steps, extra], ignore_index=True).iloc[order].reset_index(drop=True)
    both["step"] = both["step"].astype(np.int64)
    return both


def _label(label: object, path: Path | None) -> str:
    """A run's label as text the table holds: one that is no valid Unicode (a lone surrogate, in the ``config.json``
    of an older rlnb, which did not check labels) is shown with escapes (``'adam \\udcff'``), with a warning. The
    table's text column refused it, and the whole comparison failed with a ``UnicodeEncodeError``."""
    text = str(label)
    if surrogate(text) is None:
        return text
    shown = escaped(text)
    where = path / CONFIG_FILE if path is not None else "a run given as a History"
    warnings.warn(f"{where}: its label {shown!r} is not valid Unicode text (written by an older rlnb?); compared "
                  "under that label with escapes"[:300], RuntimeWarning, stacklevel=4)  # fmt: skip
    return shown


def _named(config: dict[str, Any], i: int) -> Any:
    """A run's label as its config gives it: its ``label`` or ``run_id`` (else its place ``i``), led by its
    ``variant`` where it has one (an ablation's): two variants whose labels agree to their 3 significant digits
    would be one label, their runs one line per run with no mean."""
    label = config.get("label") or config.get("run_id") or i
    variant = config.get("variant")
    if not isinstance(variant, str) or not variant or variant == label:
        return label
    return f"{variant} ({label})"


def _seed(h: History, path: Path | None) -> int | None:
    """The run's seed from its config; one that is no integer (damage) is left out with a warning."""
    seed = h.config.get("seed")
    if seed is None or isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    where = path / CONFIG_FILE if path is not None else "the run's config"
    warnings.warn(
        f"{where}: its seed {seed!r} is not an integer; compared without a seed"[:300], RuntimeWarning, stacklevel=3
    )
    return None
