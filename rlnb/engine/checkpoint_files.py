"""A session's checkpoint files on the local disk: where they go, how a save is made whole before it takes the
checkpoint's name (a hidden partial, fsynced, renamed), what a local download serves and what discard deletes.
What a checkpoint holds, and how resume reads it, is ``rlnb.engine.checkpoints``."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
import tempfile
import threading
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Literal, get_args

from rlnb import _files
from rlnb._files import fsync
from rlnb.engine import held
from rlnb.engine.leftovers import _HOST, remove_leftovers, remove_sibling_leftovers

Variant = Literal["merged", "adapter"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)


class UnsafeCheckpointFile(ValueError):
    """A checkpoint's files hold a symlink (a download would serve a file outside the checkpoint) or something
    that is not a regular file (a pipe, a device, a socket: reading it would wait for ever). ``file``: which."""

    file: Path | None = None


class DiskFull(OSError):
    """A checkpoint could not be written because the disk (or the user's quota) is full."""


class FolderNotWritable(OSError):
    """A checkpoint could not be written because its folder may not be written to (read-only, permission denied):
    like a full disk, the environment's doing, not the request's nor a bug's."""


OWN_PREFIX = "rlnb-checkpoints-"
"""The name of the temporary folder a session makes for its checkpoints without a ``checkpoint_dir``, before
``mkdtemp``'s random part."""


class CheckpointStore:
    """Where a session's checkpoints go (default: a fresh temporary folder, made on first use). ``lora``: whether
    the session's inference checkpoints have an ``adapter/`` variant. Opening a folder, and each save, removes the
    partials that an earlier process killed mid-save left there."""

    def __init__(self, directory: str | Path | None, lora: bool = False) -> None:
        self._dir = Path(directory) if directory else None
        self._own = self._dir is None  # its own temporary folder: removed at close if nothing is left in it
        self.lora = lora
        self.paths: dict[str, Path] = {}
        self._discarding = threading.Lock()  # a discard at a time, never during a listing of its files
        if self._dir is not None and self._dir.is_dir():
            remove_leftovers(self._dir)

    def path_for(self, name: str) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix=OWN_PREFIX))
            remove_sibling_leftovers(self._dir, OWN_PREFIX)  # those of killed sessions' own folders, which none reopens
        if self._dir.exists() and not self._dir.is_dir():  # mkdir's FileExistsError would say it "exists"
            raise NotADirectoryError(errno.ENOTDIR, f"checkpoint_dir {str(self._dir)!r} is no longer a folder (a "
                                     "file was put in its place); nothing was saved")  # fmt: skip
        self._dir.mkdir(parents=True, exist_ok=True)
        remove_leftovers(self._dir)
        return self._dir / name

    def close(self) -> None:
        """Remove the store's own temporary folder when no checkpoint is left in it (each Find LR left one empty
        folder behind); a folder that holds a checkpoint, or one the user named, is kept."""
        if self._own and self._dir is not None:
            with contextlib.suppress(OSError):  # not empty (a checkpoint the user keeps), or already gone
                self._dir.rmdir()

    def path(self, ckpt_id: str) -> Path:
        if ckpt_id not in self.paths:
            raise KeyError(f"no checkpoint {ckpt_id!r} in this session")
        return self.paths[ckpt_id]

    def discard(self, ckpt_id: str) -> None:
        """Delete a checkpoint's files; its id is then unknown here (``KeyError`` from ``path``). A file that cannot
        be deleted is an ``OSError`` naming it, and the checkpoint stays (discard it again once mended)."""
        with self._discarding:
            self._discard(ckpt_id)

    def _discard(self, ckpt_id: str) -> None:
        path = self.path(ckpt_id)
        try:
            if path.is_dir() and not path.is_symlink():
                if sys.version_info >= (3, 12):
                    shutil.rmtree(path, onexc=_named)
                else:
                    shutil.rmtree(path, onerror=_named)
            else:  # its file, or a link put in its place (the link goes, never what it leads to)
                path.unlink(missing_ok=True)
        except OSError as exc:
            where = exc.filename or path
            raise OSError(exc.errno, f"checkpoint {ckpt_id} could not be deleted: {where}: {exc.strerror or exc}; "
                                     "it is kept (discard it again once that is mended)") from None  # fmt: skip
        del self.paths[ckpt_id]

    def files(self, ckpt_id: str, variant: Variant = "merged") -> list[Path]:
        """The files a download of ``variant`` serves: the ``.pt`` of a training checkpoint; ``merged/``
        or ``adapter/`` of an inference checkpoint. ``variant`` names a subfolder: any other ('..') would serve
        files outside the checkpoint. A symlink or a file that is not regular among them is ``UnsafeCheckpointFile``
        naming it: nothing outside the checkpoint is served, and nothing is read that would never end. A discard of
        the checkpoint meanwhile is waited for (the list is taken whole before it, or the id is unknown after it):
        a list taken during its delete named files already gone, or only the part not yet deleted."""
        with self._discarding:
            return self._files(ckpt_id, variant)

    def _files(self, ckpt_id: str, variant: Variant) -> list[Path]:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
        path = self.path(ckpt_id)
        training = path.suffix == ".pt"
        if variant == "adapter" and not training and not self.lora:
            raise ValueError(f"checkpoint {ckpt_id} has no adapter variant (it exists only for LoRA sessions)")
        found = path if training else path / variant
        there = (found.is_symlink() or found.exists() and not found.is_dir()) if training else found.is_dir()
        if not (there and (training or path.is_dir())):
            # deleted by hand or by another process (or a file put where its folder was): not a variant it lacks
            what = "" if variant == "merged" or training else f" ({variant}/)"
            raise FileNotFoundError(f"checkpoint {ckpt_id}'s files{what} are gone from {path.parent}")
        return served_files(ckpt_id, path, found)


def served_files(ckpt_id: str, path: Path, found: Path) -> list[Path]:
    """The files under ``found`` (a variant's folder of the checkpoint at ``path``, or its ``.pt``) that a download
    serves: all of them, or ``UnsafeCheckpointFile`` naming the first symlink or file that is not regular (the local
    backend and ``rlnb serve`` both check here: a download is whole or refused, never a silent part)."""
    for link in (path, found):
        if link.is_symlink():
            raise _unsafe(ckpt_id, link)
    served = sorted(found.rglob("*")) if found.is_dir() else [found]
    for file in served:
        if file.is_symlink() or not (file.is_dir() or regular(file)):
            raise _unsafe(ckpt_id, file)
    return [f for f in served if not f.is_dir()]


def _named(func: object, name: str, exc: BaseException | tuple[type, BaseException, object]) -> None:
    """``rmtree``'s error handler (``onexc``; ``onerror`` gives ``exc_info``): the error with the file's whole path
    (``rmtree``'s own names the file alone, relative to its folder)."""
    error = exc[1] if isinstance(exc, tuple) else exc
    raise OSError(getattr(error, "errno", None), getattr(error, "strerror", None) or str(error), name) from None


def regular(path: Path) -> bool:
    """Whether ``path`` (followed, if a link) is a regular file: not a pipe, device or socket."""
    return stat.S_ISREG(path.stat().st_mode)


def open_regular(resume: Path, file: Path) -> BinaryIO:
    """``file``, of the checkpoint at ``resume``, opened to read. A pipe, device or socket there is refused as it is
    opened (``_files.regular``), one put there after any check too: reading it waited for ever (``torch.load`` of a
    ``.pt`` that is a pipe was not even checked)."""
    try:
        return open(file, "rb", opener=_files.regular)
    except OSError as exc:
        if exc.errno is None:  # _files.regular's refusal of what is no regular file; others (gone, denied) as they are
            raise not_regular(resume, file) from None
        raise


def not_regular(resume: Path, file: Path) -> UnsafeCheckpointFile:
    return UnsafeCheckpointFile(f"resume_from {str(resume)!r}: its {file} is not a regular file (a pipe, a device, "
                                "a socket): reading it would wait for ever")  # fmt: skip


def refuse_pipes(path: Path) -> None:
    """An inference checkpoint's files that resume reads (``rlnb.json``, ``merged/``) are regular files: reading a
    pipe put in their place would wait for ever. rlnb's own reads of them open with ``_files.regular`` (one put there
    after this look is refused too); a loader's opens take no opener: for them this look is all there is."""
    merged = path / "merged"
    for file in [path / "rlnb.json", *(merged.iterdir() if merged.is_dir() else ())]:
        if file.exists() and not (file.is_dir() or regular(file)):
            raise not_regular(path, file)


def _unsafe(ckpt_id: str, path: Path) -> UnsafeCheckpointFile:
    if path.is_symlink():
        error = UnsafeCheckpointFile(f"checkpoint {ckpt_id}'s {path} is a symlink (to {os.readlink(path)}), not a "
                                     "file rlnb saved: a download serves only the checkpoint's own files")  # fmt: skip
    else:
        error = UnsafeCheckpointFile(f"checkpoint {ckpt_id}'s {path} is not a regular file (a pipe, a device, a "
                                     "socket): reading it would wait for ever")  # fmt: skip
    error.file = path
    return error


_FULL = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
"""How a full disk reads in the errors of safetensors (Rust's io::Error) and of code that drops the errno."""


def disk_full(exc: BaseException) -> bool:
    """Whether a failed write failed for lack of space, looking down the chain: torch.save into a Python
    file reports torch's ``unexpected pos`` with the OSError as its context."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _FULL or any(t in str(cause) for t in _FULL_TEXTS):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


@contextlib.contextmanager
def writing(path: Path) -> Iterator[Path]:
    """Where to write ``path``: a hidden sibling, fsynced and renamed to ``path`` once whole (then its folder is
    fsynced), so that neither a process killed mid-save nor a power loss leaves a half-written or empty checkpoint
    under its name. A save that fails leaves nothing behind; one that fails on a full disk raises ``DiskFull``, one
    whose name is taken (before it writes, or by another save meanwhile) a ``FileExistsError`` naming it, one that
    may not write there (read-only) a ``FolderNotWritable`` naming the checkpoint, not the hidden partial. Once
    renamed the checkpoint is kept: a folder that cannot be fsynced then is a ``RuntimeWarning`` naming it."""
    if path.exists() or path.is_symlink():
        raise _taken(path)
    partial = path.with_name(f".{path.name}.{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    lock = None
    try:
        lock = held.hold(partial, folder=path.suffix != ".pt")  # a training checkpoint is a file, the others folders
        yield partial
        for written in [*partial.rglob("*"), partial] if partial.is_dir() else [partial]:
            fsync(written)
        _rename(partial, path)
    except Exception as exc:
        if partial.is_dir():
            shutil.rmtree(partial, ignore_errors=True)  # what stays goes once this process has ended
        else:  # a read-only mount answers EROFS, not ENOENT, for the partial it never made: ``exc`` says why
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        if disk_full(exc):
            raise DiskFull(
                f"the disk is full: checkpoint {path.name} could not be written to {path.parent} (nothing of it was "
                "kept); free space there and save again"
            ) from None
        if isinstance(exc, PermissionError) or isinstance(exc, OSError) and exc.errno == errno.EROFS:
            raise FolderNotWritable(
                exc.errno,
                f"checkpoint {path.name} could not be written to {path.parent} ({exc.strerror}: a read-only "
                "folder?); nothing of it was kept",
            ) from None
        raise
    finally:
        _files.release(lock)
    try:  # the checkpoint is whole under its name: a save that failed now would leave it unlisted, yet on disk
        fsync(path.parent)
    except OSError as exc:
        warnings.warn(f"checkpoint {path.name} is saved, but its folder {path.parent} could not be flushed to the "
                      f"disk ({exc.strerror or exc}): a power loss now could lose its name", RuntimeWarning,
                      stacklevel=3)  # fmt: skip


def _rename(partial: Path, path: Path) -> None:
    """Give ``partial`` the checkpoint's name, never over another save's: a file takes it with a hard link, which
    fails if it exists (a look, then a rename, let a save in between be replaced); a folder only ever replaces an
    empty one. Where hard links do not exist the name is looked for just before."""
    try:
        if partial.is_dir() or not _linked(partial, path):
            if path.exists() or path.is_symlink():
                raise FileExistsError(errno.EEXIST, str(path))
            os.replace(partial, path)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise _taken(path) from None
        raise


def _linked(partial: Path, path: Path) -> bool:
    """Link ``path`` to the file ``partial``, then drop the partial's name (if that fails, a leftover removed once
    this process ends); False, nothing done, where the file system has no hard links (FAT, some network mounts)."""
    try:
        os.link(partial, path)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
            return False
        raise
    with contextlib.suppress(OSError):  # a second name of the saved file (no space of its own): swept as partials are
        partial.unlink()
    return True


def _taken(path: Path) -> FileExistsError:
    return FileExistsError(
        errno.EEXIST,
        f"checkpoint {path.name} already exists in {path.parent} (another save of that name, or a file put there): "
        "it is kept as it is, and this save was not made",
    )
