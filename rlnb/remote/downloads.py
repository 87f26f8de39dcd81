"""Where a checkpoint's files go on this machine, checked before a byte is fetched, and how one arrives whole.

The API lists a checkpoint's files by name (``CheckpointFile.filename``), and those names come from the server: a
name is taken only as a relative path of plain parts under the folder asked for (no ``..``, no absolute path, no
backslash or drive, no control character), which also resolves inside it once its sub-folders exist (a symlinked
sub-folder cannot lead out), so nothing is written outside the folder whatever the server says; nor one that is
another's folder, or whose place a folder (or whose sub-folder a file) holds already (its rename would fail after
others); nor two names that differ only in case or Unicode form (one place on macOS's or Windows' file system).
Each file is written to a hidden partial file beside its place, checked against the size the API announced, and
renamed into place only when every file of the checkpoint arrived: a failure, a deadline or Ctrl-C leaves no
partial file, and no checkpoint half of one download and half of another.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx

from rlnb import wire
from rlnb._input.checks import refuse_dangling_link
from rlnb.errors import APIError, APITimeoutError


def _refused(checkpoint_id: str, name: str, why: str) -> APIError:
    return APIError(f"checkpoint {checkpoint_id}'s download lists the file {name!r}, which {why}: nothing was written")


def relative_path(checkpoint_id: str, name: str) -> Path:
    """``name`` as a path under the download folder, or ``APIError`` naming it (``../x``, ``/etc/x``, ``a\\b``...)."""
    if not name or any(not c.isprintable() for c in name):
        raise _refused(checkpoint_id, name, "is empty or holds a control character")
    if name.startswith("/") or "\\" in name or ":" in name:
        raise _refused(checkpoint_id, name, "is not a relative path of plain names (absolute, a backslash or a drive)")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise _refused(checkpoint_id, name, "has an empty, '.' or '..' part: it would lead outside the folder")
    return Path(*parts)


def folded(rel: Path) -> str:
    """The one name a case- and normalization-insensitive file system (macOS's, Windows') gives ``rel``'s spellings:
    Unicode's canonical caseless form."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", str(rel)).casefold())


def _refuse_folded_twins(checkpoint_id: str, rels: list[Path]) -> None:
    """``APIError`` naming two names (or a name and another's folder) that differ only in case or Unicode form: two
    places here, one on macOS's or Windows' file system, where the second file was written over the first."""
    files: dict[str, Path] = {}
    pairs = [(files.setdefault(folded(rel), rel), rel) for rel in rels]
    pairs += [(files.get(folded(part), part), rel) for rel in rels for part in rel.parents[:-1]]
    for first, rel in pairs:
        if first not in (rel, *rel.parents):  # the same spelling: listed twice, or a folder, refused after
            raise APIError(
                f"checkpoint {checkpoint_id}'s download lists {str(first)!r} and {str(rel)!r}, which differ only in "
                "case or Unicode form where they meet: one place on a case-insensitive file system (macOS's, "
                "Windows'), where one would be written over the other; nothing was written"
            )


PARTIAL = len(".") + len(".XXXXXXXX.partial")
"""The bytes a file's partial name adds to its own (``partials``: ``.{name}.`` and mkstemp's 8 characters)."""


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) ``folder``'s file system takes, or the nearest folder above that exists."""
    above = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    try:
        return os.pathconf(above, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows), or the name not known here
        return 255


def check_folder(folder: object) -> Path:
    """``folder`` as a path that is, or can become, a folder; else ``ValueError`` naming it (checked before sending)."""
    if not isinstance(folder, str | os.PathLike) or not str(folder):
        raise ValueError(f"folder must be a non-empty path (str or Path), got {folder!r}")
    path = Path(folder)
    refuse_dangling_link("folder", path)  # mkdir said "File exists" once the URLs were fetched
    if path.exists() and not path.is_dir():
        raise ValueError(f"folder {str(path)!r} is a file, not a folder: the checkpoint's files go into a folder")
    return path


def targets(checkpoint_id: str, files: list[wire.CheckpointFile], folder: Path) -> list[Path]:
    """The place of each file in ``folder`` (made; ``partials`` makes the sub-folders the names need), all checked
    before anything is fetched: a bad name, a name twice, a negative size, no file at all, or more bytes than the disk
    has free."""
    if not files:
        raise APIError(f"checkpoint {checkpoint_id}'s download lists no files: nothing to download")
    rels = [relative_path(checkpoint_id, f.filename) for f in files]
    if len(set(rels)) < len(rels):
        twice = next(str(r) for r in rels if rels.count(r) > 1)
        raise _refused(checkpoint_id, twice, "is listed twice")
    _refuse_folded_twins(checkpoint_id, rels)
    for f in files:
        if f.size < 0:
            raise _refused(checkpoint_id, f.filename, f"has a negative size ({f.size})")
    longest = _name_max(folder)
    for rel in rels:  # a bare OSError "File name too long" (of the partial file: the longest name)
        if any(len(os.fsencode(p)) > longest for p in rel.parts[:-1]) or len(os.fsencode(rel.name)) + PARTIAL > longest:
            raise _refused(checkpoint_id, str(rel), f"has a part longer than this file system takes ({longest} bytes a "
                           f"name, {PARTIAL} of them for the partial file's own)")  # fmt: skip
    folders = {part for rel in rels for part in rel.parents}
    for rel in rels:  # ``sub/x`` and ``sub``: renamed in turn, the second would fail on the folder the first made
        if rel in folders:
            raise _refused(checkpoint_id, str(rel), "is also the folder of another file listed")
    folder.mkdir(parents=True, exist_ok=True)
    root = folder.resolve()
    out = []
    for rel in rels:  # each checked before any folder is made: a mkdir through a symlink would make one outside
        if not (root / rel).parent.resolve().is_relative_to(root):
            raise _refused(checkpoint_id, str(rel), f"leads outside {str(folder)!r} through a symlinked folder")
        out.append(root / rel)
    for rel in rels:  # in the way: a failed rename or mkdir once other files were fetched, or renamed
        if (root / rel).is_dir():
            raise _refused(checkpoint_id, str(rel), f"is a folder in {str(folder)!r}: a file cannot replace it")
        file = next((p for p in reversed(rel.parents[:-1]) if (root / p).exists() and not (root / p).is_dir()), None)
        if file is not None:
            raise _refused(checkpoint_id, str(rel), f"needs {str(file)!r} in {str(folder)!r} to be a folder: it is "
                           "a file")  # fmt: skip
    need, free = sum(f.size for f in files), shutil.disk_usage(root).free
    if need > free:  # before the sub-folders are made: a refusal leaves none behind
        raise APIError(
            f"checkpoint {checkpoint_id}'s files take {need} bytes, and {str(folder)!r} has {free} free: nothing was "
            "written"
        )
    return out


@contextlib.contextmanager
def partials(places: list[Path]) -> Iterator[list[Path]]:
    """A hidden, empty partial file beside each place (opened one at a time by the caller: a list of 10,000 files
    must not hold 10,000 descriptors), in the sub-folders its name needs; renamed into its place when the block ends
    well, removed whatever happens otherwise (an error, Ctrl-C), with the sub-folders made for them that are left
    empty (a failed download left ``sub/deep`` behind)."""
    made: list[Path] = []
    folders: list[Path] = []  # made here, each before those inside it
    done = False
    try:
        for place in places:
            folders += reversed([p for p in (place.parent, *place.parent.parents) if not p.exists()])
            place.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=place.parent, prefix=f".{place.name}.", suffix=".partial")
            os.close(fd)
            made.append(Path(name))
        yield made
        for partial, place in zip(made, places, strict=True):
            os.replace(partial, place)
        done = True
    finally:
        for partial in made:
            partial.unlink(missing_ok=True)
        for folder in reversed(folders) if not done else ():
            with contextlib.suppress(OSError):  # one a file was renamed into (a rename failed later) stays
                folder.rmdir()


def copy(response: httpx.Response, out: IO[bytes], checkpoint_id: str, item: wire.CheckpointFile, end: float) -> None:
    """A 2xx response's body into ``out``: exactly ``item.size`` bytes, as sent (no content coding), by ``end``
    (``time.monotonic()``), else ``APIError`` (``APITimeoutError`` past ``end``)."""
    url = str(response.request.url.copy_with(query=None))  # the query is the URL's signature

    def fail(why: str, cls: type[APIError] = APIError) -> APIError:
        return cls(f"checkpoint {checkpoint_id}'s file {item.filename!r} {why}", method="GET", url=url)

    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding not in ("", "identity"):
        raise fail(f"came with Content-Encoding {coding}: rlnb asked for the bytes as stored (identity)")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) != item.size:
        raise fail(f"is {declared} bytes long by its Content-Length, but the API listed it as {item.size} bytes")
    out.seek(0)
    out.truncate()
    got = 0
    chunks = [response.content] if response.is_stream_consumed else response.iter_raw()
    for chunk in chunks:
        got += len(chunk)
        if got > item.size:
            raise fail(f"sent more than the {item.size} bytes the API listed for it; rlnb stopped reading")
        out.write(chunk)
        if time.monotonic() > end:
            raise fail(f"was not downloaded by the download's deadline ({got} of {item.size} bytes came)",
                       APITimeoutError)  # fmt: skip
    if got != item.size:
        raise fail(f"ended after {got} of the {item.size} bytes the API listed for it")
