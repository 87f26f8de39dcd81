"""One run of a name written to a sink's place at a time, on this machine (``Lease.claim``).

Two sessions with one run id both find nothing at the place (``Sink.holds``) before either writes: TensorBoard would
show both runs' steps as one (two event files in one folder), MLflow make two runs of one name. A claim is a
(place, run name) pair taken in this process (a dict) and across the machine's processes (an ``flock`` on a file
named by the pair's hash in the temporary folder, which the kernel releases however the process ends). Each says
which run folder holds it (``holder``): an earlier session of the same run still writing is no other run. Processes
on other machines writing to one shared folder are not seen; neither are any where ``fcntl`` is missing (Windows).
The lock files stay (a small file per place and name): removing one while another process opens it would let two
processes hold "the" lock at once.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import stat
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from rlnb import _files
from rlnb.sinks.base import RunInfo, SinkWarning

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

HELD = "being written there now by another session (of this process or another on this machine)"
"""Where a warning says the run is, when its claim is held."""

_lock = threading.Lock()
_writing: dict[tuple[str, str], str] = {}
"""(place, run name) of each run being written now in this process, and who writes it (``take``'s ``owner``)."""


def folder() -> Path:
    """Where the lock files are: the user's own folder in the temporary folder (read each time: tests move it)."""
    return Path(tempfile.gettempdir()) / f"rlnb-sink-claims-{_user()}"


def _user() -> str:
    """The user's name, or ``uid<n>`` where the user has none: a container run as a uid outside ``/etc/passwd``
    (``docker run --user 12345``, OpenShift), with no ``$USER``, makes ``getpass.getuser`` raise ``KeyError``
    (``OSError`` from Python 3.13), which would drop every sink at its run's start and fail every ``rlnb.export``."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid{os.getuid()}"


@dataclass
class Claim:
    key: tuple[str, str]
    fd: int | None
    """The held lock file's descriptor, None where no lock could be taken (then this process's set alone)."""


def take(where: str, name: str, owner: str = "") -> Claim | None:
    """The claim of run ``name`` at ``where`` for ``owner`` (which run folder writes it: ``holder`` tells), or None if
    a session of this process or another process on this machine holds it now."""
    key = (where, name)
    with _lock:
        if key in _writing:
            return None
        fd = _hold(key)
        if fd is False:
            return None
        if isinstance(fd, int):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, owner.encode("utf-8", "surrogatepass"), 0)
        _writing[key] = owner
        return Claim(key, fd)


def owner(run: RunInfo) -> str:
    """Who writes ``run``, as a claim holds it: its run folder and first ``created_at`` (a run folder deleted and its
    id used again is another run); ``""`` for a run in memory."""
    return f"{run.path}\0{run.params.get('created_at', '')}" if run.path else ""


def holder(where: str, name: str) -> str:
    """The ``owner`` that holds the claim of run ``name`` at ``where`` now; ``""`` where it cannot be told."""
    key = (where, name)
    with _lock:
        if key in _writing:
            return _writing[key]
    try:
        return (folder() / _file_name(key)).read_bytes().decode("utf-8", "surrogatepass")
    except (OSError, UnicodeDecodeError):
        return ""


def drop(claim: Claim) -> None:
    with _lock:
        _writing.pop(claim.key, None)
        _files.release(claim.fd)  # unlocked first: a process forked while it is held would keep it


def _hold(key: tuple[str, str]) -> int | None | bool:
    """The descriptor of the pair's lock file, locked; False if another process holds it; None where no lock can be
    taken (no ``fcntl``, a folder that cannot be made, a file system without locks): nothing can be told."""
    if fcntl is None:
        return None
    try:
        where = folder()
        where.mkdir(mode=0o700, exist_ok=True)
        if not _private(where):
            _say_not_private(where)
            return None
        fd = os.open(where / _file_name(key), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        taken: bool | None = _files.take(fd)
    except OSError:
        taken = None
    if not taken:
        os.close(fd)
        return taken
    return fd


def _file_name(key: tuple[str, str]) -> str:
    """The lock file of a (place, run name) pair: its hash."""
    return hashlib.sha256("\0".join(key).encode()).hexdigest()[:32] + ".lock"


def _private(where: Path) -> bool:
    """Whether ``where`` is a folder of this user's that no one else can write. The temporary folder is shared:
    another user who made it first (writable by all, or a link to a folder of theirs) held a run's lock file there,
    and every run of that name was left out of its sink."""
    st = os.lstat(where)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


_warned = False


def _say_not_private(where: Path) -> None:
    """Warn once a process that ``where`` is not used: two of this user's processes could then write one run. Called
    by ``take`` with ``_lock`` held."""
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(f"{str(where)!r} is not a private folder of this user's (another user made it, or can write it): "
                  "sink runs are told apart within this process only", SinkWarning, stacklevel=2)  # fmt: skip
