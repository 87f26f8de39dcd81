"""Where ``rlnb demo`` keeps the earlier output it replaces, and the lock that makes it one demo at a time in ``--out``.

A demo holds ``LOCK`` from before it moves anything until it returns: a second demo in that ``--out`` is told another
demo runs there (not, for the few milliseconds of a move, that a stopped demo had left its output there). The earlier
output goes into ``STAGING`` file by file, then that folder is renamed, at once, to the first free aside folder
(``EARLIER``, then ``EARLIER-2``, ``-3``...): a demo killed part way (``kill -9``) leaves ``STAGING``, which the next
demo puts back in place (``recover``). A stopped demo's aside folder is kept, and the next demo sets its own earlier
output aside in the next free one, so no run is lost and no manual step is needed. A run that completed deletes the
one aside folder it made: renamed to a ``DELETING`` folder first, which a later demo finishes deleting when the
deletion was interrupted (a Ctrl-C), so a half-deleted output is never taken for a kept one."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import IO

from rlnb._files import hold_lock
from rlnb.errors import RunLocked

LOCK = ".rlnb-demo.lock"
"""In ``--out``: held by the demo running there."""

EARLIER = ".rlnb-demo-earlier"
"""In ``--out``: the earlier output a demo set aside (its files, ``run/`` and manifest); numbered ``-2``, ``-3``... when
a stopped demo's is already kept there."""

STAGING = ".rlnb-demo-setting-aside"
"""In ``--out``: the earlier output while it is being set aside, renamed to an ``EARLIER`` folder once it all is."""

DELETING = ".rlnb-demo-deleting"
"""In ``--out``: an aside folder a completed run is deleting (numbered as ``EARLIER``)."""

_NUMBERED = re.compile(r"-([2-9]|[1-9][0-9]+)")


def hold_out(out: Path) -> IO[str]:
    """``out``'s demo lock, held until ``release``; a ``ValueError`` saying that another demo runs there."""
    try:
        return hold_lock(out / LOCK, f"another rlnb demo is running in {out} (pid {{holder}}): wait for it to end or "
                                     "pick another --out")  # fmt: skip
    except RunLocked as exc:
        raise ValueError(str(exc)) from None
    except OSError as exc:  # a link or a named pipe planted as the lock file
        raise ValueError(f"cannot write the demo's files in {out}: {exc}") from None


def _numbered(out: Path, base: str) -> list[Path]:
    """The folders ``base``, ``base-2``, ... in ``out`` (no link), in number order."""
    found = []
    for path in out.iterdir():
        rest = path.name[len(base) :] if path.name.startswith(base) else None
        if (rest == "" or rest and _NUMBERED.fullmatch(rest)) and path.is_dir() and not path.is_symlink():
            found.append((int(rest[1:]) if rest else 1, path))
    return [path for _, path in sorted(found)]


def asides(out: Path) -> list[Path]:
    """The aside folders in ``out``, each an earlier output kept there, oldest first."""
    try:
        return _numbered(out, EARLIER)
    except OSError:  # an --out that cannot be listed: nothing can be said to be kept there
        return []


def free(out: Path, base: str) -> Path:
    """The first of ``base``, ``base-2``, ... in ``out`` that no file, folder or link takes."""
    n = 1
    while (path := out / (base if n == 1 else f"{base}-{n}")).exists() or path.is_symlink():
        n += 1
    return path


def first_lines(out: Path, kept: list[Path], aside: Path | None, removed: list[str]) -> list[str]:
    """What the demo says before it trains: the aside folders stopped demos left, which stay (and where this run's
    earlier output goes instead), and what it replaces."""
    lines = []
    if kept:
        into = f"; this run's earlier output goes into {aside}" if aside else ""
        lines.append(f"rlnb demo: the output stopped demos set aside stays in {', '.join(map(str, kept))} (delete it "
                     f"once you no longer need it){into}")  # fmt: skip
    return lines + ([f"rlnb demo: replacing the earlier output in {out}: {', '.join(removed)}"] if removed else [])


def kept_words(folders: list[Path]) -> str:
    """Where earlier output is kept, for a demo's last line ("" when nowhere)."""
    if not folders:
        return ""
    whose = "demo's output is" if len(folders) == 1 else "demos' outputs are"
    return f"; the earlier {whose} kept in {', '.join(map(str, folders))}"


def recover(out: Path) -> list[str]:
    """With ``out``'s lock held: what a demo killed part way left, finished or undone, and the lines that say so. A
    ``STAGING`` folder goes back in place (a name taken meanwhile: the folder is kept as an aside folder instead); a
    ``DELETING`` folder is deleted (one that cannot be is left, said)."""
    said = []
    staging = out / STAGING
    if staging.is_symlink() or staging.exists() and not staging.is_dir():
        raise ValueError(f"{staging} is not a folder an rlnb demo made; move it away or pick another --out")
    if staging.is_dir():
        for earlier in sorted(staging.iterdir()):
            if not (out / earlier.name).exists() and not (out / earlier.name).is_symlink():
                earlier.rename(out / earlier.name)
        if any(staging.iterdir()):
            kept = free(out, EARLIER)
            staging.rename(kept)
            said.append(f"rlnb demo: a demo stopped while it set the earlier output in {out} aside: kept in {kept}")
        else:
            staging.rmdir()
            said.append(f"rlnb demo: a demo stopped while it set the earlier output in {out} aside: put back in place")
    for deleting in _numbered(out, DELETING):
        try:
            shutil.rmtree(deleting)
        except OSError as exc:
            said.append(f"rlnb demo: the output a completed demo replaced, in {deleting}, could not be deleted "
                        f"({exc}): delete it")  # fmt: skip
    return said


def drop(out: Path, aside: Path | None) -> str:
    """The new run completed: the aside folder it made is deleted, renamed to a ``DELETING`` folder first (a Ctrl-C in
    the deletion leaves that, which the next demo finishes). "", or the line that says what could not be deleted."""
    if aside is None or not aside.is_dir():
        return ""
    left = aside
    try:
        deleting = free(out, DELETING)
        aside.rename(deleting)
        left = deleting
        shutil.rmtree(deleting)
    except OSError as exc:  # a read-only file in it, a file held open on Windows
        return (f"rlnb demo: the run completed, but the earlier output it replaced, set aside in {left}, could not "
                f"be deleted ({exc}): delete it")  # fmt: skip
    return ""
