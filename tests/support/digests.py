"""A reward's digest from another Python, and a sweep folder to resume: the reward-digest tests' shared setup."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd

import rlnb
from rlnb.sweep import fingerprint, grid, sweep

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
CONFIGS = grid(learning_rate=[1e-3, 2e-3])
"""Two one-step trials: ``stopped_after_one`` runs the first and stops before the second."""


def another_pythons_bytecode(monkeypatch: Any) -> None:
    """This process as another Python minor version: its bytecode compiles differently, its version is another."""
    bytecode = fingerprint._bytecode
    monkeypatch.setattr(fingerprint, "_bytecode", lambda code: b"3.99" + bytecode(code))
    monkeypatch.setattr(fingerprint, "PYTHON", "3.99")
    monkeypatch.setattr(fingerprint, "BYTECODE", "bytecode, Python 3.99")


def stopped_after_one(runs_dir: Path, task: Any) -> tuple[pd.DataFrame, Path]:
    """A sweep of ``CONFIGS`` with reward ``task`` into ``runs_dir``, stopped once its first trial has run: its
    table and its folder, for a test to resume."""
    stop = threading.Event()
    first = sweep(BASE, CONFIGS, steps=1, runs_dir=runs_dir, stop=stop, progress=lambda *a: stop.set(),
                  executor="threads", task=task)  # fmt: skip
    return first, Path(first.attrs["path"])
