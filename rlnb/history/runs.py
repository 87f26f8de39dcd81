"""A run folder read back, and opened again by a later session: ``read_run`` (what ``History.load`` restores),
``open_run`` (a run folder locked for recording, continuing whatever it holds, its config alone too, with the same
optimizer once it holds an operation or figure: ``same_optimizer``), and the warnings of a session that starts below
the step its run reached (``warn_continued``) or adds to a loaded run in memory (``warn_in_memory``).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb._input.checks import user_path
from rlnb.errors import user_stacklevel
from rlnb.history.completion_log import read_completions
from rlnb.history.loaded import from_row, logged_row
from rlnb.history.paths import new_run_id, run_folder
from rlnb.history.reading import jsonl_rows, read_config, read_jsonl, set_aside_config
from rlnb.history.record import MAX_SEQ, Record, fits_int64, warn_bad
from rlnb.history.runconfig import EARLIER, changed, continued, environment
from rlnb.history.store import METRICS_FILE, OPS_FILE, RunStore, RunStoreWarning, holds_run

__all__ = ["RunContinuedWarning", "RunFolder", "open_run", "read_run", "warn_continued", "warn_in_memory"]


class RunContinuedWarning(UserWarning):
    """A session continues a run whose earlier session reached a later step than this one starts at."""


@dataclass
class RunFolder:
    """What a run folder holds: its config, each operation's latest record (in submission order), the
    logged figures and the completions."""

    path: Path
    config: dict[str, Any]
    records: list[Record] = field(default_factory=list)
    logged: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[int | None] = field(default_factory=list)
    """The session that logged each of ``logged`` (``loaded.logged_row``)."""
    completions: list[dict[str, Any]] = field(default_factory=list)
    config_damaged: bool = False
    """Whether its ``config.json`` is there but cannot be read (``read_config``): set aside before it is replaced."""

    @property
    def next_seq(self) -> int:
        """The number the next operation recorded in this run takes."""
        return max((r.seq for r in self.records), default=-1) + 1

    @property
    def ended_at(self) -> float | None:
        """The latest time recorded (POSIX seconds), or None."""
        times = [t for r in self.records for t in (r.submitted_at, r.started_at, r.finished_at) if t == t]
        return max(times, default=None)


def _near_miss(path: Path) -> str:
    """What ``path`` is instead of a run folder, when it is near one: a file of a run, or a folder of runs."""
    with contextlib.suppress(OSError):
        if path.is_file() and (path.parent / OPS_FILE).exists():
            return f": it is a file of the run folder {path.parent}, which History.load takes"
        if path.is_dir():
            inside = sorted(p.name for p in path.iterdir() if holds_run(p, unreadable=False))
            if inside:
                return (
                    f": it is a folder of {len(inside)} run(s); load one, such as {path / inside[0]}, or list "
                    f"them with rlnb.runs({str(path)!r})"
                )
    return ""


def read_run(path: str | Path) -> RunFolder:
    """The run folder at ``path``, written by a (possibly killed) session. What cannot be read — a corrupt
    ``config.json``, a half-written line, a value of the wrong type — is left out with a warning."""
    path = user_path("path", path)  # History.load(5): a bare TypeError from Path
    if not (path / OPS_FILE).exists():
        raise FileNotFoundError(f"{path} is not an rlnb run folder (no {OPS_FILE}){_near_miss(path)}")
    if not (path / OPS_FILE).is_file():
        raise ValueError(f"{path / OPS_FILE} is not a file")
    config, damaged = read_config(path)
    records = read_ops(path / OPS_FILE)
    bad: list[str] = []
    logged = (logged_row(line, bad) for _, line in read_jsonl(path / METRICS_FILE))
    kept = [row for row in logged if row is not None]
    warn_bad(path / METRICS_FILE, bad)
    rows, sessions = [row for row, _ in kept], [session for _, session in kept]
    return RunFolder(path, config, records, rows, sessions, read_completions(path), damaged)


def read_ops(file: Path) -> list[Record]:
    """Each operation's latest record in ``file`` (an ``ops.jsonl``: its last line of a usable ``seq`` and ``kind``),
    in submission order. A line that cannot be read, or a value of the wrong type, is left out with a warning."""
    latest: dict[int, Record] = {}
    bad: list[str] = []
    late: list[str] = []
    for n, line in jsonl_rows(file):
        seq = line.get("seq")
        if fits_int64(seq) and seq >= MAX_SEQ:
            late.append(f"line {n} (seq {seq})")
            continue
        rec = from_row(line, bad)
        if rec is not None:
            latest[rec.seq] = rec  # the last line of an operation is its latest state
    records = [latest[seq] for seq in sorted(latest)]
    warn_bad(file, bad, stacklevel=5)
    if late:
        warnings.warn(
            f"{file}: skipped {', '.join(late[:5])}: a seq of {MAX_SEQ} or more leaves no room to "
            "number the operations after it; it is damage (a hand edit)",
            RuntimeWarning,
            stacklevel=4,
        )
    return records


def open_run(
    config: dict[str, Any], runs_dir: str | Path | None, run_id: str | None
) -> tuple[RunStore, dict[str, Any], RunFolder | None]:
    """The run folder ``<runs_dir>/<run_id>/`` locked for a new session (a new id when ``run_id`` is None),
    the config to record (``config`` over the run's first one, with the versions of this environment), and
    what the folder held already (None for a new run). A second writer gets ``rlnb.RunLocked``."""
    run_id = run_id if run_id is not None else new_run_id(str(config.get("optimizer", "")))
    path = run_folder(runs_dir, run_id)
    store = RunStore(path)  # the lock first: nobody else writes while the earlier records are read
    try:  # whatever fails here, the lock is released: a retry is not refused as RunLocked
        written = [f for f in (path / OPS_FILE, path / METRICS_FILE) if f.is_file() and f.stat().st_size]
        kept, damaged = ({}, False) if written else read_config(path, say=False)
        # a run that only logged figures is continued too, and one that holds only its config (annotated, then ended
        # before any operation): else it would be written over, its label and first created_at lost
        earlier = read_run(path) if written or (kept and (path / OPS_FILE).is_file()) else None
        damaged = earlier.config_damaged if earlier is not None else damaged
        if damaged:
            set_aside_config(path)
        before, seq = (earlier.config, earlier.next_seq) if earlier is not None else (None, 0)
        config = continuation(run_id, before, config, seq, bool(written))
        store.write_config(config)
    except BaseException:
        store.close()
        raise
    return store, config, earlier


def continuation(run_id: str | None, earlier: dict[str, Any] | None, config: dict[str, Any], seq: int, held: bool
                 ) -> dict[str, Any]:  # fmt: skip
    """The config a session set up with ``config`` records in a run that held ``earlier`` (None: a new run), whose
    operations it numbers from ``seq``: where it began (``continued``; by operation number, as a clock behind the
    earlier session's misplaced it), refused with another optimizer (``same_optimizer``) and warned of other changes
    (``warn_changed``) where the run ``held`` an operation or figure (one of neither has no step to relabel: ``EARLIER``
    keeps its setup). ``open_run`` and a session given a history (``History.continue_for``) both go by it."""
    name = f"run {run_id}" if run_id is not None else "this history"
    if earlier is not None and held:
        changes = changed(earlier, config)
        same_optimizer(name, changes)
        warn_changed(name, changes)
    first = continued(run_id, earlier, time.time(), seq)
    if run_id is None:  # a history of no run folder (``record=False``) names none
        del first["run_id"]
    return {**first, **config, "versions": environment()}


def same_optimizer(run: str, changes: dict[str, tuple[Any, Any]]) -> None:
    """``ValueError`` naming both when ``changes`` (``runconfig.changed``: what a session continuing a run sets up
    otherwise) holds the optimizer: one run is one optimizer's (its config names one, which ``rlnb.runs`` and the
    plots go by), and the later session's silently relabelled the earlier session's steps. An optimizer a damaged
    config does not name (no string) is not refused: ``warn_changed`` names it with the other changes. ``run``: what
    is continued (``run a``)."""
    before, now = changes.get("optimizer", (None, None))
    if isinstance(before, str) and isinstance(now, str) and before != now:
        raise ValueError(
            f"{run} was recorded with optimizer {before}, and this session's is {now}: one run holds one "
            f"optimizer's steps. Use a new run_id (or continue {run} with a {before} session)"
        )


def warn_changed(run: str, changes: dict[str, tuple[Any, Any]]) -> None:
    """``RunContinuedWarning`` naming what a session continuing a run sets up otherwise than the session before it
    (a seed, a model): the config's top level becomes this session's, the earlier one's is kept in ``EARLIER``."""
    if changes:
        said = ", ".join(f"{k} {before!r} -> {now!r}" for k, (before, now) in changes.items())
        warnings.warn(f"{run} continues a session set up otherwise ({said}): its config now says this "
                      f"session's values; the earlier sessions' are in its {EARLIER!r}", RunContinuedWarning,
                      stacklevel=user_stacklevel())  # fmt: skip


def warn_continued(run_id: Any, reached: int, start: int) -> None:
    """``RunContinuedWarning`` when a session starting at step ``start`` continues a run that reached a later
    step: the steps between appear twice."""
    if reached <= start:
        return
    name = "this history" if run_id is None else f"run {run_id}"  # one in memory (``record=False``) names no run
    twice = f"step {reached} will appear" if reached == start + 1 else f"steps {start + 1}-{reached} will appear"
    resumed = ", as here" if start > 0 else ""  # a session at step 0 resumed from no checkpoint: it has a fresh model
    warnings.warn(
        f"{name} continues an earlier session that reached step {reached}, and this one starts at step "
        f"{start}: {twice} twice in history.steps, each with the figure logged "
        "last at that step (history.logged keeps every row). Use a new run_id, or resume_from= the run's "
        f"checkpoint at step {reached} to go on counting (an earlier checkpoint repeats the steps after it{resumed}).",
        RunContinuedWarning,
        stacklevel=user_stacklevel(),
    )


def warn_in_memory(folder: Path) -> None:
    """``RunStoreWarning`` for a session given a history loaded from ``folder``: it records in memory only."""
    warnings.warn(
        f"history= was loaded from {folder}: this session adds to it in memory only. To go on recording that "
        f"run on disk, connect with runs_dir={str(folder.parent)!r}, run_id={folder.name!r} instead.",
        RunStoreWarning,
        stacklevel=user_stacklevel(),
    )


def warn_memory_only(folder: Path) -> None:
    """Say that a figure or completions logged on a history ``History.load`` read stay in memory: the run folder is
    only read (another session may be writing it), and they are lost at the kernel's end, not silently."""
    warnings.warn(
        f"this history was loaded from {folder}: what is logged on it stays in memory, not in that folder; "
        "history.save(new_folder) writes it all, or continue the run with rlnb.connect(..., run_id=...)",
        RunStoreWarning,
        stacklevel=user_stacklevel(),
    )
