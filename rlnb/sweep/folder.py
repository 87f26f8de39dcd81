"""The sweep folder: ``sweep.json`` (the arguments), ``trials.jsonl`` (its rows: ``rows``), one run folder per
trial, and for Optuna ``study.db``; made, locked for one sweep at a time, and its settings written or, on resume,
compared. What makes a sweep resumable.

``sweep.json`` is standard JSON, as a run folder's files are (``history.jsontext``: a NaN setting is ``"NaN"``; an
older rlnb's bare ``NaN`` still reads), written as they are: never through a link (``_files``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from rlnb._files import fsync, hold_lock, refuse_pipe, regular, release, write_new
from rlnb._input.checks import refuse_dangling_link
from rlnb.history import default_runs_dir, new_run_id
from rlnb.history.jsontext import config_text, spelled
from rlnb.history.reading import loads, read_config
from rlnb.params import OptimizerParams
from rlnb.tasks import Task

from .fingerprint import task_detail
from .options import SearchOptions, TrialOptions
from .rows import json_equal, read_rows

SETTINGS_FILE, LOCK_FILE = "sweep.json", "sweep.lock"
RESULT_OPTIONS = frozenset(
    {"model", "base_model", "dtype", "lora", "muon_scaling", "muon_split", "ns_dtype", "sampling_seed", "eos_token_id",
     "tokenizer", "resume_from", "resume_from_checkpoint_id", "load_optimizer", "model_options", "muon_options"}
)  # fmt: skip
"""The ``rlnb.connect`` options that change what a trial computes, recorded in ``sweep.json`` so that a resume
with others is refused (``muon_scaling="match_adam"`` on resume would run the rest of an "original" sweep in other
units, in one table). Keys, sinks, timeouts, threads and the like may differ on resume."""


ALWAYS = ("search", "base", "configs", "space", "sampler", "pruner", "objective", "seeds", "steps", "task", "target")
"""The settings every rlnb's ``sweep.json`` has recorded: one without them was edited by hand. Those recorded since
(``schedule``, ``options``, ``task_detail``, ``variants``) an older folder lacks, and are not compared there."""


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
    ``RunLocked`` naming the holder. Two sweeps resumed on one folder would both run its unfinished trials, and the
    second's rows (FAILED: each trial's run folder the first's) be recorded after, and over, the first's."""
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
    refusals are (a folder there would raise a bare ``IsADirectoryError``)."""
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
        write_new(folder / (SETTINGS_FILE + ".tmp"), config_text(settings).encode("utf-8"), sync=True)
        (folder / (SETTINGS_FILE + ".tmp")).replace(path)
        fsync(folder)  # the rename too: a power loss leaves the settings whole or none
        return []
    try:  # a sweep killed while writing it left it empty or cut short: a bare JSONDecodeError named no file
        stored = spelled(loads(_settings_text(path)))  # an older rlnb's bare NaN as it is written now
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"resume: {path} is damaged ({exc}); it records the sweep's arguments, so this folder "
                         "cannot be resumed: start a new sweep") from exc  # fmt: skip
    if not isinstance(stored, dict):  # a list or null: `k in stored` would compare nothing, or raise a TypeError
        raise ValueError(f"resume: {path} is not a sweep's settings (a JSON object), got {type(stored).__name__}")
    now = json.loads(config_text(settings))  # as written: a NaN setting is "NaN" on both sides (NaN != NaN)
    lacking = [k for k in ALWAYS if k in now and k not in stored]  # removed by hand: resumed with any value of it
    if lacking:
        raise ValueError(f"resume: {path} lacks {', '.join(lacking)}, which every rlnb records (edited by hand?), so "
                         "this sweep's arguments cannot be checked against it: put it back as the sweep had it, or "
                         "start a new sweep")  # fmt: skip
    # another key the stored settings lack was not recorded by the older rlnb that made the folder: nothing to compare
    differs = {
        k
        for k in now
        if k in stored and not json_equal(now[k], stored[k]) and not (same and k in same and same[k](stored[k]))
    }
    changed = [f"{k}: {now[k]!r} (the sweep used {stored[k]!r})" for k in now if k in differs]
    if changed:
        raise ValueError("resume: run it with the same arguments; changed: " + "; ".join(changed))
    return read_rows(folder, search=settings.get("search") is not None)


def trial_run_id(folder: Path, trial: int, seed: int) -> str:
    """``trial-007-seed0``; a trial run again after a stop gets ``-r2``, ``-r3``, ... (never mixed with the old)."""
    run_id, attempt = f"trial-{trial:03d}-seed{seed}", 1
    while (folder / run_id).exists():
        attempt += 1
        run_id = f"trial-{trial:03d}-seed{seed}-r{attempt}"
    return run_id


def run_pythons(folder: Path) -> set[str]:
    """The Python versions (``3.11``) the folder's trial runs recorded in their ``config.json``: which Python made a
    folder whose ``sweep.json`` does not say (an older rlnb's reward digest, by bytecode)."""
    found = set()
    for run in folder.glob("trial-*"):
        try:
            config, _ = read_config(run, say=False)
        except OSError:  # unreadable: it tells nothing
            continue
        versions = config.get("versions")
        python = versions.get("python") if isinstance(versions, dict) else None
        if isinstance(python, str):
            found.add(".".join(python.split(".")[:2]))
    return found
