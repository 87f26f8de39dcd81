"""Many runs at once: ``runs()`` lists a folder of run folders, ``compare()`` stacks their steps tables.

A run that cannot be read is a row with its ``error``, never a failure of the whole listing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb import wire
from rlnb.history.history import History
from rlnb.history.store import OPS_FILE, default_runs_dir

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


def _row(run: Path) -> dict[str, Any]:
    """One run's summary; ``error`` says why a run could not be summarised (the rest is then missing)."""
    try:
        h = History.load(run)
        steps, cfg, df = h.steps, h.config, h.df
        created = cfg.get("created_at")
        return {
            "run_id": str(cfg.get("run_id") or run.name),
            "path": str(run),
            "created_at": pd.to_datetime(created, unit="s", utc=True)
            if isinstance(created, int | float) and not isinstance(created, bool)
            else pd.NaT,
            "backend": cfg.get("backend"),
            "model": cfg.get("model"),
            "optimizer": cfg.get("optimizer"),
            "seed": cfg.get("seed"),
            "operations": len(h),
            "failed": int((df.status == wire.OperationStatus.FAILED).sum()),
            "steps": int(steps.step.max()) if len(steps) else 0,
            "final_loss": float(steps.loss.iloc[-1]) if len(steps) else math.nan,
            "error": None,
        }
    except Exception as exc:  # noqa: BLE001 - one bad run is a row, not the end of the listing
        return {"run_id": run.name, "path": str(run), "created_at": pd.NaT, "error": f"{type(exc).__name__}: {exc}"}


def runs(path: str | Path | None = None) -> pd.DataFrame:
    """The runs under a folder (default ``./rlnb-runs``), newest first, one row each. A run that cannot be
    read is listed with its ``error`` (None for the others)."""
    root = Path(path).expanduser() if path is not None else default_runs_dir()
    found = sorted(p for p in root.iterdir() if (p / OPS_FILE).exists()) if root.exists() else []
    frame = pd.DataFrame([_row(run) for run in found], columns=COLUMNS)
    frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
    errors = [e if isinstance(e, str) else None for e in frame["error"]]
    frame["error"] = pd.Series(errors, index=frame.index, dtype=object)  # None, not NaN, for the others
    return frame.sort_values("created_at", ascending=False, ignore_index=True, na_position="last")


def compare(histories: Iterable[History | str | Path], labels: Sequence[str] | None = None) -> pd.DataFrame:
    """Several runs' ``steps`` tables stacked, with ``run`` (label) and ``seed`` columns, ready for
    ``plots.compare`` or a pivot (``df.pivot(index="step", columns="run", values="loss")``)."""
    frames = []
    for i, h in enumerate(histories):
        h = h if isinstance(h, History) else History.load(h)
        label = labels[i] if labels is not None else str(h.config.get("label") or h.config.get("run_id") or i)
        frame = h.steps
        frame.insert(0, "run", label)
        frame.insert(1, "seed", h.config.get("seed"))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run", "seed", "step"])
