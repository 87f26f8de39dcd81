"""The files ``rlnb demo`` writes in ``--out``, and which of them a later demo may replace: its own (named in
``MANIFEST``, unchanged since) and a run folder rlnb wrote that no live session holds; any other file of its names only
with ``--force``, and a name there that is no plain file never. Checked before a model loads.

Replaced means set aside in an aside folder (``aside``) while the new run trains, and deleted only once it has
completed a step: a run that stops before it recorded anything puts them back, and one that stops later leaves them
there, said. ``--force`` deleted them before training, so a demo that then failed (a Ctrl-C) had lost the user's files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

from rlnb._files import release, write_new
from rlnb._input.checks import not_folder, refuse_dangling_link
from rlnb.cli.demo.aside import DELETING, EARLIER, LOCK, STAGING, free, hold_out, recover
from rlnb.errors import RunLocked
from rlnb.history.store import LOCK_FILE, OPS_FILE, RUN_FILES, lock_run

OUTPUTS = ("history.csv", "rewards.csv", "demo.png")
"""The files the demo writes in ``--out`` beside its run folder ``run/``."""

MANIFEST = ".rlnb-demo.json"
"""In ``--out``: what the demo wrote there, so a later demo replaces its own files and no one else's."""


def _earlier_run(run: Path) -> bool:
    """Whether ``run`` holds a run folder that rlnb wrote (rlnb's run files and nothing else); anything else there
    may be the user's, so ``ValueError`` naming it (an empty folder: False, the run is written into it)."""
    if not run.exists() and not run.is_symlink():
        return False
    refuse = f"{run} is not an rlnb run folder (it holds other files); move it away or pick another --out"
    if not run.is_symlink() and run.exists() and not run.is_dir():  # a file or a pipe holds no files
        raise ValueError(f"{run} is {not_folder(run.stat().st_mode)}, not a folder: the demo's run folder goes there; "
                         "move it away or pick another --out")  # fmt: skip
    if run.is_symlink() or not run.is_dir():
        raise ValueError(refuse)
    names = {p.name for p in run.iterdir()}
    if names and (OPS_FILE not in names or not names.issubset(RUN_FILES)):
        raise ValueError(refuse)
    return bool(names)


def _set_aside_run(run: Path, aside: Path) -> bool:
    """Move ``run`` into ``aside`` when it is a run folder that rlnb wrote (``_earlier_run``) that no live session
    holds: whether there was one."""
    if not _earlier_run(run):
        return False
    held = _lock(run)
    try:
        aside.mkdir(exist_ok=True)
        run.rename(aside / run.name)
    finally:
        release(held)  # unlocked first: a child forked meanwhile would keep a closed lock held
    return True


def _lock(run: Path) -> IO[str]:
    """``run``'s lock, or a ``ValueError`` naming the session that holds it: most likely a demo running in ``--out``."""
    try:
        return lock_run(run)
    except RunLocked as exc:
        raise ValueError(f"{run} is being written by another rlnb session (pid {exc.holder}): is a demo running in "
                         f"{run.parent}? wait for it or pick another --out") from None  # fmt: skip


def _refuse_running(run: Path) -> None:
    """A ``ValueError`` when a live session holds ``run`` (``_lock``), checked before anything moves: else a second
    demo in one ``--out`` would move the first's manifest aside, then be refused by the lock and leave it there; with
    the first's earlier output set aside, it would be told a stopped demo had left that. A lock that cannot be tried
    stops nothing."""
    if run.is_symlink() or not (run / LOCK_FILE).is_file():
        return
    try:
        release(_lock(run))
    except OSError:
        return  # a run/ this process cannot open: moving it fails next, and says why


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _own_files(out: Path) -> dict[str, str]:
    """What an earlier demo wrote in ``out`` (``MANIFEST``: each file's sha256, ``run/`` by name); {} when none did."""
    try:
        own = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError):  # damaged (nested past the decoder, too): no files are its own
        return {}
    return own if isinstance(own, dict) else {}


def note_own_files(out: Path, names: list[str]) -> None:
    """Remember ``names`` as the demo's own (``run/`` before training, the rest once written), replaced atomically;
    never written through a link left under the temporary name (``write_new``), which would write the link's target."""
    own = {name: ("" if name == "run/" else _digest(out / name)) for name in names}
    tmp = out / (MANIFEST + ".tmp")
    try:
        write_new(tmp, json.dumps(own).encode())
        tmp.replace(out / MANIFEST)
    except OSError:  # the rename failed (write_new removes its own file when the write, fsync or close fails)
        if not tmp.is_symlink():
            tmp.unlink(missing_ok=True)
        raise


def set_aside_earlier_output(out: Path, force: bool) -> tuple[Path | None, list[str]]:
    """Before training, with ``out``'s lock held: the files an earlier demo wrote in ``out`` (and left unchanged) are
    moved into ``STAGING``, then that into the first free aside folder (``aside``); any other file of its names
    (a user's history.csv, which would be overwritten without a word) only with ``force``; a name there that is no
    plain file never. That folder (None when nothing moved) and the names it moved, for the demo to say (an
    interrupted demo's steps, said to be kept, would otherwise go without a word at the next)."""
    _refuse_others(out, force)
    staging, aside, moved = out / STAGING, None, []
    try:  # none of the earlier demo's files is left beside a new run that stops early
        for name in [MANIFEST, "run", *OUTPUTS]:  # the manifest first: restore_earlier_output reads it there
            if name == "run" and _set_aside_run(out / "run", staging):  # a run id that exists would be continued
                moved.append("run/")
            elif name != "run" and (out / name).exists():
                staging.mkdir(exist_ok=True)
                (out / name).rename(staging / name)
                moved += [name] if name != MANIFEST else []
        if staging.is_dir():  # all at once: a kill -9 before this leaves STAGING, which the next demo puts back
            aside = free(out, EARLIER)
            staging.rename(aside)
        note_own_files(out, ["run/"])
    except BaseException as exc:  # a Ctrl-C too: else the manifest goes aside and the rest stays, the folder refused
        setting = bool(moved) or aside is not None or staging.is_dir()
        for folder in (
            staging,
            aside,
        ):  # restore_earlier_output would take the earlier run/ still there for the new run's
            if folder is not None and folder.is_dir():  # what is left there stays, and the demo's last line says
                with contextlib.suppress(OSError):
                    _put_back(out, folder)
        if isinstance(exc, OSError):  # with nothing to set aside, the manifest could not be written (a full disk)
            what = f"set the earlier demo's files in {out} aside" if setting else f"write the demo's files in {out}"
            raise ValueError(f"cannot {what}: {exc}") from None
        raise
    return aside, moved


def write_outputs(history: Any, out: Path) -> Any:
    """history.csv, rewards.csv and demo.png, then the manifest naming them; the logged frame. A write that fails (a
    full disk, a Ctrl-C) deletes the ones it wrote, each made again from ``run/``: a half-written history.csv, named by
    no manifest, stopped the next demo as a file of the user's."""
    from rlnb.viz import plots

    try:
        history.to_csv(out / "history.csv")
        logged = history.logged
        logged.to_csv(out / "rewards.csv", index=False)
        plots.overview(history).savefig(out / "demo.png", dpi=110)  # reward first; rl_step logged the RL metrics
        note_own_files(out, ["run/", *OUTPUTS])
    except BaseException:
        for name in OUTPUTS:  # this run's: an earlier file of the name was set aside, or there was none
            with contextlib.suppress(OSError):
                (out / name).unlink(missing_ok=True)
        raise
    return logged


def _put_back(out: Path, aside: Path) -> None:
    """Each file of ``aside`` back in ``out`` (an ``OSError`` where one cannot go), the folder deleted; a manifest the
    new run wrote is deleted when none was set aside: it would name as the demo's a ``run/`` that is no demo's
    (``--force``)."""
    if not (aside / MANIFEST).exists():
        (out / MANIFEST).unlink(missing_ok=True)
    for earlier in aside.iterdir():
        earlier.replace(out / earlier.name)
    aside.rmdir()


def restore_earlier_output(out: Path, aside: Path | None) -> bool:
    """A run that stopped: the output it set aside in ``aside`` goes back in place when the run recorded no operation
    (its run folder is deleted); otherwise both are kept, the earlier in ``aside``, as also when a move fails. Whether
    it went back."""
    ops = out / "run" / OPS_FILE
    if aside is None or not aside.is_dir() or ops.exists() and ops.stat().st_size > 0:
        return False
    run = out / "run"
    try:
        if run.is_dir() and not run.is_symlink() and {p.name for p in run.iterdir()}.issubset(RUN_FILES):
            shutil.rmtree(run)  # the new session's, empty
        _put_back(out, aside)
    except OSError:
        return False  # what is left in EARLIER stays there, and the demo's last line says where
    return True


def _refuse_others(out: Path, force: bool) -> None:
    """``set_aside_earlier_output``'s refusals, which change nothing: a name of the demo's that is no plain file, or
    other files of its names without ``force``; first a session writing its run folder. An aside folder a stopped demo
    left is no refusal (the next one is numbered)."""
    _refuse_running(out / "run")
    for name in (*OUTPUTS, MANIFEST):  # a manifest that is a named pipe: reading it would wait for ever
        if (out / name).is_symlink() or (out / name).exists() and not (out / name).is_file():
            raise ValueError(f"{out / name} is not a file an rlnb demo wrote; move it away or pick another --out")
    own = _own_files(out)
    others = [name for name in OUTPUTS if (out / name).exists() and own.get(name) != _digest(out / name)]
    others += ["run/"] if _earlier_run(out / "run") and "run/" not in own else []
    if others and not force:
        raise ValueError(f"{out} holds files no earlier rlnb demo wrote there ({', '.join(others)}): pass --force to "
                         "replace them, or pick another --out")  # fmt: skip


def _refuse_kept(out: Path) -> None:
    """A ``ValueError`` when ``out`` is in (or links into) a folder where a demo keeps earlier output: a later demo in
    the folder above puts a half-done set-aside back, deletes a ``DELETING`` folder, and takes an aside folder for the
    output a stopped demo kept."""
    for path in (out.absolute(), out.resolve()):
        kept = next((p for p in (path, *path.parents) if p.name.startswith((EARLIER, STAGING, DELETING))), None)
        if kept is not None:
            raise ValueError(f"--out {out} is in {kept}, a folder where rlnb demo keeps earlier output (a later demo "
                             "may move or delete it): pick another --out")  # fmt: skip


def check_out(out: Path, force: bool) -> list[str]:
    """A ``ValueError`` when ``out`` cannot take the demo's files, before anything is made or loaded: the nearest
    folder of it that exists takes no file (a file named as ``--out``; ``/proc/self``, where the run trained in memory,
    then writing history.csv raised), another demo runs there (``hold_out``), or it holds files no demo wrote
    (``_refuse_others``), once what a killed demo left half done is finished (``recover``: the lines that say so)."""
    try:
        return _check_out(out, force)
    except OSError as exc:  # a name past the file system's limit: "[Errno 36] File name too long", exit 1, no --out
        raise ValueError(f"cannot write the demo's files in {out}: {exc}") from None


def _check_out(out: Path, force: bool) -> list[str]:
    """``check_out``, its ``OSError``s raised as they are."""
    refuse_dangling_link("--out", out)  # mkdir said "File exists" once the model had loaded
    _refuse_kept(out)
    there = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not there.is_dir():  # not an error naming a temporary file's name in it: "Not a directory: 'f/tmpgdge4jqb'"
        raise ValueError(
            f"cannot write the demo's files in {out}: {there} is {not_folder(there.stat().st_mode)}, not a folder"
        )
    try:
        with tempfile.TemporaryFile(dir=there):
            pass
    except OSError as exc:  # its words name the probe's temporary file ("'/proc/tmp30wiey90'"), not --out
        raise ValueError(
            f"cannot write the demo's files in {out}: {there} takes no new file ({exc.strerror})"
        ) from None
    if not out.is_dir():
        return []
    if not any(p.name.startswith((LOCK, STAGING, DELETING)) for p in out.iterdir()):  # no demo was here
        _refuse_others(out, force)  # and no lock file is left in a folder of the user's that it refuses
        return []
    held = hold_out(out)
    try:
        said = recover(out)  # an OSError (a half-done set-aside that cannot be put back): check_out says it
        _refuse_others(out, force)
    finally:
        release(held)
    return said
