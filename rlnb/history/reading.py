"""Reading a run folder back: ``read_jsonl`` and ``read_config`` never stop at a bad line — they skip what they
cannot parse and say so, a line nested deeper than rlnb ever writes (``MAX_DEPTH``) included, as it would
exhaust Python's stack later on.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rlnb._files import regular
from rlnb.history.jsontext import config_values
from rlnb.history.store import CONFIG_FILE

MAX_DEPTH = 32
"""Deepest nesting of a line or config read back. rlnb writes a few levels (a record's params, the
config's versions); anything deeper is damage, and would give RecursionError in the JSON decoder, or
later when the record is encoded again."""


def loads(text: str) -> Any:
    """One JSON value, or ``ValueError`` when it is not JSON or is nested deeper than ``MAX_DEPTH``. A text of no more
    than ``MAX_DEPTH`` brackets (a record's line has 3) is nested no deeper: its values are not walked."""
    if text.count("{") + text.count("[") <= MAX_DEPTH:
        return json.loads(text)
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than Python's JSON decoder can read (rlnb writes <= {MAX_DEPTH})") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_DEPTH:
                    raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
                stack.append((child, depth + 1))
    return value


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every well-formed line; a corrupt or half-written line is skipped with
    a warning."""
    return list(jsonl_rows(path))


def jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``read_jsonl``'s rows one at a time, its warning after the last: a reader that keeps less than every row (an
    operation's last line, ``read_ops``) does not hold a big run's lines all at once, which the garbage collector
    would scan again and again (a third of a load's time)."""
    bad = []
    for n, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            row = loads(line)
        except ValueError:
            bad.append(n)
            continue
        if isinstance(row, dict):
            yield n, row
        else:
            bad.append(n)
    warn_corrupt(path, bad, stacklevel=5)  # past this generator and the reader taking its rows


def warn_corrupt(path: Path, lines: list[int], stacklevel: int) -> None:
    """The warning for ``lines`` of ``path`` that are no JSON object (a hand edit, a write cut short), where any."""
    if lines:
        shown = ", ".join(map(str, sorted(lines)[:5]))
        warnings.warn(f"{path}: skipped {len(lines)} corrupt or half-written line(s) (line {shown})", RuntimeWarning,
                      stacklevel=stacklevel)  # fmt: skip


def read_config(path: Path, say: bool = True) -> tuple[dict[str, Any], bool]:
    """The run's ``config.json``, and whether it is damaged: there and not empty, yet corrupt or not an object (a
    session continuing the run sets it aside, ``set_aside_config``, from this one read). One that is missing,
    corrupt or not an object gives ``{}`` (with a warning for the last two, if ``say``): the operations are worth
    loading without it."""
    file = path / CONFIG_FILE
    fh = _opened(file)
    if fh is None:
        return {}, False
    with fh:
        raw = fh.read()
    try:
        config = loads(raw.decode("utf-8-sig", errors="replace"))  # a BOM: read past it
    except ValueError as exc:
        if say:
            warnings.warn(f"{file} is corrupt ({exc}); loading the run without its config", RuntimeWarning,
                          stacklevel=3)  # fmt: skip
        return {}, bool(raw)
    if not isinstance(config, dict):
        if say:
            warnings.warn(f"{file} is not a JSON object; loading the run without its config", RuntimeWarning,
                          stacklevel=3)  # fmt: skip
        return {}, True
    return config_values(config), False  # "NaN" as written since; a bare NaN (an older rlnb's) is read as one


def set_aside_config(path: Path) -> None:
    """A ``config.json`` that cannot be read (a hand edit's trailing comma) is about to be replaced by the new
    session's, which lost what it held (a label, a note, the first ``created_at``) for good: it is renamed
    ``config.json.damaged`` (``.damaged.1``, ... if taken) first, with a warning naming it, so it can be mended."""
    file = path / CONFIG_FILE
    names = (path / f"{CONFIG_FILE}.damaged{f'.{n}' if n else ''}" for n in range(10**6))
    kept = next(k for k in names if not os.path.lexists(k))  # exists() misses a dangling link: rename would replace it
    try:
        file.rename(kept)
    except OSError:  # a folder that cannot be written: the store says so when it writes the config
        return
    warnings.warn(f"{file} could not be read: kept as {kept.name} (mend it and copy back what it held, such as a "
                  "label); this session writes a new config.json", RuntimeWarning, stacklevel=4)  # fmt: skip


def numbered_lines(file: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line of ``file`` (none where it is no regular file, ``_opened``); a BOM an
    editor put first is read past, bytes that are no UTF-8 as U+FFFD."""
    fh = _opened(file)
    if fh is None:
        return
    with io.TextIOWrapper(fh, encoding="utf-8-sig", errors="replace") as text:
        yield from enumerate(text, 1)


def opened_to_read(file: Path) -> None:
    """Open ``file`` and close it, raising or warning as ``read_jsonl`` would: for a reader that does not need what
    it holds, yet must fail where a whole read of the run fails (a file that cannot be read)."""
    fh = _opened(file)
    if fh is not None:
        fh.close()


def _opened(file: Path) -> IO[bytes] | None:
    """``file`` opened to read, or None (with a warning) where it is no regular file (``_regular``), also one put
    there after that look and before the open (``_files.regular``: a pipe swapped in would be waited on for ever)."""
    if not _regular(file):
        return None
    try:
        return open(file, "rb", opener=regular)  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        if exc.errno is not None:  # missing, unreadable: as before
            raise
        warnings.warn(f"{file} is not a regular file; the run is loaded without it ({exc})", RuntimeWarning,
                      stacklevel=4)  # fmt: skip
        return None


def _regular(file: Path) -> bool:
    """Whether ``file`` is a regular file to read. Anything else there — a named pipe (opening it would wait for a
    writer forever), a folder, a device — is left out with a warning."""
    if file.is_file():
        return True
    if file.exists():
        warnings.warn(f"{file} is not a regular file; the run is loaded without it", RuntimeWarning, stacklevel=5)
    return False
