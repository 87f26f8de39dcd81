"""Where a run is written: the runs folder (``$RLNB_RUNS_DIR`` or ``./rlnb-runs``), a run's id and its folder
inside it, each checked before anything is written, so that no run lands outside it or only in memory.

What the folder holds and how it is written is ``rlnb.history.store``.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from rlnb._files import shared
from rlnb._input.checks import refuse_dangling_link, user_path
from rlnb.history.store import CONFIG_TMP, WRITTEN

RUNS_DIR_ENV = "RLNB_RUNS_DIR"
"""Overrides the default run folder ``./rlnb-runs``."""


def default_runs_dir() -> Path:
    """Where runs go when ``runs_dir`` is not given: ``$RLNB_RUNS_DIR``, else (unset or empty, as a shell's
    ``RLNB_RUNS_DIR=`` unsets it) ``./rlnb-runs``."""
    return Path(os.environ.get(RUNS_DIR_ENV) or "rlnb-runs").expanduser()


def new_run_id(label: str = "") -> str:
    """A fresh run id, ``<date>-<time>[-label]-<6 hex>``: ids sort by start time, and the random tail keeps
    runs started in the same second apart."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return "-".join(p for p in (stamp, label, uuid.uuid4().hex[:6]) if p)


MAX_RUN_ID_BYTES = 255
"""The longest file name most file systems take (NAME_MAX): a longer run id cannot be a folder."""


def check_run_id(run_id: object) -> str:
    """``run_id`` names one folder inside the runs folder: a single plain path component that a file system
    takes, so that no run is written (or continued) outside it, or only in memory."""
    if not isinstance(run_id, str) or run_id in ("", ".", "..") or any(c in run_id for c in ("/", "\\", "\0")):
        raise ValueError(
            f"run_id must be a folder name inside the runs folder (no '/', '\\', '..', not empty), got {run_id!r}"
        )
    try:  # surrogateescape: a folder named in another encoding ("r\udcff", byte 0xff) is one run_id can name
        size = len(run_id.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as exc:  # a lone surrogate no file name's bytes give ("\ud800")
        raise ValueError(
            f"run_id holds a lone surrogate, {run_id[exc.start]!r} at position {exc.start}: it is not "
            "valid Unicode text, nor a folder name"
        ) from None
    if size > MAX_RUN_ID_BYTES:
        raise ValueError(f"run_id must be at most {MAX_RUN_ID_BYTES} bytes (a folder name), got {size} bytes")
    return run_id


def runs_root(runs_dir: str | Path | None) -> Path:
    """The runs folder ``runs_dir`` (default ``$RLNB_RUNS_DIR`` or ``./rlnb-runs``), checked: an error naming it
    when it is no path, ``''``, a file or a path through one, or a link to nothing (or a path through one) — no run
    could be written there."""
    if runs_dir == "":  # Path("") is the working folder
        raise ValueError("runs_dir must be a folder's path or None, got ''")
    root = user_path("runs_dir", runs_dir) if runs_dir is not None else default_runs_dir()
    field = "runs_dir" if runs_dir is not None or not os.environ.get(RUNS_DIR_ENV) else f"${RUNS_DIR_ENV}"
    refuse_dangling_link(field, root)  # mkdir failed "File exists" after the model loaded
    for folder in (root, *root.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ValueError(
                    f"{field} {str(root)!r}: {folder} is a file, not a folder: pass a folder (made if missing)"
                )
            break
    return root


def run_folder(runs_dir: str | Path | None, run_id: str) -> Path:
    """``<runs_dir>/<run_id>``, checked: a runs folder that is a file, a run id that is a file there or a symbolic
    link there (writing through it would put the run wherever the link points), or a run folder holding a link where
    a session writes (``store.WRITTEN``) is refused."""
    path = runs_root(runs_dir) / check_run_id(run_id)
    if path.is_symlink():
        raise ValueError(
            f"run_id {run_id!r}: {path} is a symbolic link (to {os.readlink(path)!r}); rlnb writes a run only into "
            "a folder inside the runs folder: pick another run_id, or pass the target's parent as runs_dir"
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"run_id {run_id!r}: {path} is a file, not a run folder: pick another run_id")
    for file in (path / name for name in WRITTEN):  # a run folder from elsewhere: its run.lock a link to your notes
        if file.is_symlink():
            raise ValueError(
                f"run_id {run_id!r}: {file} is a symbolic link (to {os.readlink(file)!r}); rlnb writes a run's files "
                "only inside its folder, never through a link: remove the link, or pick another run_id"
            )
        names = file.stat().st_nlink if file.name != CONFIG_TMP and file.is_file() else 1  # the tmp is made afresh
        if names > 1:  # a snapshot made with cp -al: every line appended went into it too
            raise ValueError(f"run_id {run_id!r}: {shared(file, names)}, or pick another run_id")
    return path
