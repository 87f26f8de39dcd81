"""A history written out: ``save`` as a run folder ``History.load`` restores whole (every operation, every logged
figure, the completions and the config; for a run whose own folder could not be written, or a copy), and the
operations table as CSV or Parquet, its dict columns (``metrics``, ``params``) as standard JSON text
(``rlnb.history.jsontext``), which ``from_json_text`` reads back.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb._files import fsync, refuse_link, write_new
from rlnb._input.checks import refuse_dangling_link, user_path
from rlnb.history.jsontext import config_text, line, numbers, spelled
from rlnb.history.record import TIMES
from rlnb.history.runconfig import session_starts
from rlnb.history.store import COMPLETIONS_FILE, CONFIG_FILE, METRICS_FILE, OPS_FILE, RUN_FILES, holds_run

DICT_COLUMNS = ("metrics", "params")
SESSION = "session"
"""The column ``with_sessions`` adds: which session of a continued run submitted the operation (0 for the first), the
boundaries ``df.attrs`` holds and CSV cannot carry; ``read_back`` rebuilds them from it."""
SAVING = ".saving"
"""The suffix of a file ``save`` is writing: renamed into place once every file is written."""


def save_run(
    path: str | Path,
    config: dict[str, Any],
    ops: Iterable[dict[str, Any]],
    logged: Iterable[dict[str, Any]],
    completions: Iterable[dict[str, Any]],
) -> Path:
    """Write a run folder at ``path`` (made if missing); ``FileExistsError`` if it holds a run file already."""
    if path == "":
        raise ValueError("history.save: path must be a folder's path, got ''")
    folder = user_path("path", path)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"history.save: {folder} is a file, not a folder (nothing was written)")
    refuse_dangling_link("history.save: path", folder, after=" (nothing was written)")  # mkdir said "File exists"
    taken = run_files(folder)
    if taken:
        raise FileExistsError(
            f"{folder} holds {', '.join(taken)} already (a run, or a model's config): save to a new folder "
            "(nothing was written)"
        )
    runs = sorted(c.name for c in folder.iterdir() if holds_run(c, unreadable=False)) if folder.is_dir() else []
    if runs:  # its files beside its runs: rlnb.runs(folder) then refused it as "a run folder, not a folder of runs"
        raise ValueError(f"history.save: {folder} is a folder of runs ({runs[0]}, ...): save to a new folder in it, "
                         f"such as {folder / 'saved'} (nothing was written)")  # fmt: skip
    try:  # a link left under a name the save writes first (a copied folder's, a planted one): its target was written
        for name in (OPS_FILE, METRICS_FILE, COMPLETIONS_FILE, CONFIG_FILE):
            refuse_link(folder / (name + SAVING))
    except OSError as exc:
        raise OSError(f"history.save: {exc} (nothing was written)") from None
    made = list(itertools.takewhile(lambda f: not f.exists(), (folder, *folder.parents)))  # the leaf first
    written: list[Path] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)  # in the try: a parent made before it fails is removed too
        texts = [(CONFIG_FILE, config_text(config))]
        for name, rows in ((METRICS_FILE, logged), (COMPLETIONS_FILE, completions), (OPS_FILE, ops)):
            lines = "".join(map(line, rows))
            if lines or name != COMPLETIONS_FILE:  # a run without RL steps has no completions.jsonl
                texts.append((name, lines))
        for name, text in texts:  # under names no reader takes, then renamed: a save killed part way would make a
            write_new(folder / (name + SAVING), text.encode("utf-8"), sync=True)  # folder that loads as a run without
            written.append(folder / (name + SAVING))  # its figures, and refuses a retry; never through a link left;
        for name, _ in texts:  # synced: a power loss past the renames would empty them. ops.jsonl last: the folder
            (folder / (name + SAVING)).replace(folder / name)  # is a run once every file is in place
            written.append(folder / name)
        for synced in (folder, *(f.parent for f in made)):  # the renames, and each folder made, on the disk too
            with contextlib.suppress(OSError):  # a folder that cannot be opened (Windows) keeps them anyway
                fsync(synced)
    except BaseException:
        _remove(written, made)
        raise
    return folder


def _remove(files: list[Path], made: list[Path]) -> None:
    """Undo a save that failed part way (a full disk): its files, and the folders the save made (the folder and the
    parents it needed, leaf first). Left behind, they would make a retry once space is freed refuse the folder as
    holding a run already, and leave empty folders about."""
    for file in files:
        with contextlib.suppress(OSError):
            file.unlink(missing_ok=True)
    for folder in made:
        try:
            folder.rmdir()  # only if empty: nothing but what the save made
        except FileNotFoundError:  # the mkdir failed before it made this one
            continue
        except OSError:
            return


def run_files(folder: Path) -> list[str]:
    """The run folder's files (``store.RUN_FILES``) that ``folder`` holds, which neither ``save`` nor an export
    (``write_whole``) may write over: the run would be lost. ``config.json`` alone counts too: a Hugging Face model
    folder has one. A link counts, dangling or not (a write through it lands wherever it points)."""
    return [n for n in RUN_FILES if _taken(folder / n)]


def _taken(file: Path) -> bool:
    """Whether something is at ``file``: a file, a folder, or a link (even one to nothing)."""
    return file.exists() or file.is_symlink()


STANDARD = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)


def from_json_text(text: str) -> Any:
    """The dict a ``metrics`` or ``params`` cell of ``history.to_csv``/``to_parquet`` holds, as ``history.df`` had it:
    ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` read back as those floats (a file of an older rlnb, which wrote them
    bare, reads too)."""
    return numbers(json.loads(text))


def with_json(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a fresh ``History.df``) with its dict columns as standard JSON text, which CSV and Parquet hold."""
    for col in DICT_COLUMNS:
        frame[col] = frame[col].map(lambda d: STANDARD.encode(spelled(d)))
    return frame


def with_sessions(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a fresh ``History.df``) with its ``session`` column (``SESSION``) from its ``attrs``: a CSV keeps no
    ``attrs``, and a continued run read back from one added the dead session's unstepped loss to the next session's
    first step."""
    session = pd.Series(0, index=frame.index, dtype="int64")
    for start in session_starts(frame.attrs):
        if start.seq is not None:
            session += frame["seq"] >= start.seq
        else:  # a run an older rlnb continued: by time (``SessionStart.begins``)
            session += (frame["submitted_at"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds() >= (start.at or 0.0)
    frame[SESSION] = session
    return frame


def write_whole(path: Any, render: Callable[[Any], object]) -> None:
    """Write a whole file at ``path`` by ``render`` (``to_csv`` of a buffer): rendered in memory, written under a new
    name beside it and synced (``write_new``), then renamed over it. Written in place, a full disk left a truncated
    file where the last good export was, which pandas read as fewer rows without a word; now that file stays. A
    file of a run folder's (``run_files``: ``ops.jsonl`` beside a run) is refused, as ``save`` refuses the folder. A
    file-like ``path`` (a buffer pandas takes) or a URL (``s3://``, which pandas opens by fsspec) is written as pandas
    writes it, and so is a named pipe or a device (nothing there to keep); a symbolic link is written through, to its
    target, as pandas did."""
    if not isinstance(path, str | os.PathLike) or "://" in os.fsdecode(path):
        render(path)
        return
    file = Path(os.path.realpath(user_path("path", path)))
    if file.exists() and not file.is_file() and not file.is_dir():
        render(str(file))
        return
    if not file.parent.is_dir():  # else write_new's error would name the .saving file
        raise FileNotFoundError(f"cannot write {file}: its folder {file.parent} does not exist")
    if file.name in RUN_FILES and (taken := run_files(file.parent)):  # the path mistyped: the run would be lost
        raise FileExistsError(
            f"{file} is one of the files of {file.parent}, which holds {', '.join(taken)} (a run, or a model's "
            "config): write the table to a file of another name (nothing was written)"
        )
    buffer = io.BytesIO()
    render(buffer)
    new = file.with_name(file.name + SAVING)
    write_new(new, buffer.getvalue(), sync=True)
    try:
        os.replace(new, file)
    except BaseException:
        new.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename on the disk too; a folder that cannot be opened keeps it anyway
        fsync(file.parent)


def read_back(frame: pd.DataFrame) -> pd.DataFrame:
    """An operations table as ``to_csv`` / ``to_parquet`` wrote it and pandas read it back (``pd.read_csv``): its
    times as UTC timestamps again (CSV keeps them as text: every plot of it raised pandas' bare ``TypeError``; a column
    of numbers is POSIX seconds, as the run folder's, and one of empty cells, NaN, no time) and its
    dict columns as dicts (JSON text in both files: an evaluation's ``forward_only`` mark went unseen, its loss summed
    into its step's). ``History.df`` itself is returned as it is; a column that holds neither is a ``ValueError``
    naming it."""
    times = [c for c in TIMES if c in frame and not isinstance(frame[c].dtype, pd.DatetimeTZDtype)]
    dicts = [c for c in DICT_COLUMNS if c in frame and any(isinstance(v, str) for v in frame[c])]
    sessions = SESSION in frame and "continued_seq" not in frame.attrs
    if not times and not dicts and not sessions:
        return frame
    frame = frame.copy(deep=False)  # the caller's table stays as it is (its attrs are kept)
    for col in times:
        try:
            numeric = pd.api.types.is_numeric_dtype(frame[col])  # POSIX seconds (a CSV's empty column: NaN)
            frame[col] = pd.to_datetime(frame[col], utc=True, **({"unit": "s"} if numeric else {"format": "ISO8601"}))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the operations table's {col} column holds no times, as history.to_csv writes them: "
                             f"{str(exc).splitlines()[0].split('. You might')[0]}"[:300]) from None  # fmt: skip
    for col in dicts:
        try:
            frame[col] = [
                from_json_text(v) if isinstance(v, str) else v if isinstance(v, dict) else {} for v in frame[col]
            ]
        except ValueError as exc:
            raise ValueError(f"the operations table's {col} column holds text that is no JSON: {exc}"[:300]) from None
    if sessions:
        frame.attrs.update(_boundaries(frame))
    return frame


def _boundaries(frame: pd.DataFrame) -> dict[str, list[Any]]:
    """Where later sessions continued the run (``df.attrs``' ``continued_seq`` / ``continued_at``), from the ``session``
    column ``with_sessions`` wrote: each session begins at the first operation of its number or a later one's."""
    session = pd.to_numeric(frame[SESSION], errors="coerce")
    if session.isna().any() or (session < 0).any():
        raise ValueError("the operations table's session column holds something other than a session's number (0, 1, "
                         "...), as history.to_csv writes it")  # fmt: skip
    seqs: list[Any] = []
    ats: list[Any] = []
    for n in range(1, (int(session.max()) if len(session) else 0) + 1):
        first = frame.loc[session >= n, "seq"].idxmin()  # by number: a table sorted otherwise keeps its sessions
        seqs.append(int(frame.at[first, "seq"]))
        ats.append((frame.at[first, "submitted_at"] - pd.Timestamp(0, tz="UTC")).total_seconds())
    return {"continued_at": ats, "continued_seq": seqs}
