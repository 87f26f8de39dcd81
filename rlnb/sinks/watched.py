"""The file or folder a run is written to on this machine, checked before each batch (``Watched``), and the folder a
sink writes in, checked when the sink is made (``check_folder``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from rlnb._input.checks import refuse_dangling_link

if TYPE_CHECKING:  # what a batch is (a sink's base checks its folder with this module)
    from rlnb.sinks.base import Failure, Point


class Watched:
    """The file or folder a run is written to on this machine (a TensorBoard event file, an MLflow or Trackio SQLite
    store, Trackio's inbox of JSONL fragments), checked before each batch: deleted (``rm -rf runs``), the libraries
    fail with a bare ``[Errno 2]``, an SQL error ("attempt to write a readonly database"), or make a new store and
    write the rest of the run there in silence. ``check`` raises instead, which drops the sink with a warning naming
    the place and what was lost."""

    def __init__(self, path: Path | None, folder: Path | None = None) -> None:
        self.path, self.folder = path, folder  # folder: the one holding path, named if it went too
        self._id, self._folder_id = _identity(path), _identity(folder)

    def check(self, lost: str) -> None:
        """``FileNotFoundError`` if the place is gone or is another file now; ``lost``: what then goes unwritten. It
        names what was removed: the folder, if it went with the file (``rm -rf runs``), else the file alone."""
        now = _identity(self.path)
        if self._id is None:  # not there when the run started: watched from when it is
            self._id = now
        elif now != self._id:
            folder_gone = self.folder is not None and _identity(self.folder) != self._folder_id
            raise FileNotFoundError(
                f"{self.folder if folder_gone else self.path} was deleted while the run was written to it: {lost} not "
                "written there (the run's history has everything: rlnb.export writes the whole run again)"
            )


def lost_from(points: list[Point], failures: list[Failure]) -> str:
    """What a batch that cannot be written loses, for ``Watched.check``."""
    first = min([p.step for p in points] + [f.step for f in failures], default=0)
    return f"the points from step {first} on were"


def _identity(path: Path | None) -> tuple[int, int] | None:
    try:
        stat = path.stat() if path is not None else None
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino) if stat is not None else None


def refuse_link(field: str, folder: Path) -> None:
    """``refuse_dangling_link`` for a sink's folder: a link to nothing on its path would make the first point's mkdir
    fail with "[Errno 17] File exists", naming no link, and drop the sink."""
    refuse_dangling_link(field, folder, after="; nothing was sent")


def check_folder(field: str, folder: Path) -> None:
    """A ``ValueError`` naming ``field`` unless ``folder`` can hold the sink's files: a file there or above it, or a
    folder that cannot be written, failed at the run's first point instead, dropping the sink with a bare OS error
    (``[Errno 17] File exists``). Nothing is made: a temporary file without a name is made in the deepest folder of
    the path that exists, and gone at once."""
    refuse_link(field, folder)
    try:
        above = next((p for p in (folder, *folder.parents) if p.exists()), None)  # OSError: a name too long
        if above is not None and not above.is_dir():
            where = "is a file" if above == folder else f"is under {str(above)!r}, a file"
            raise ValueError(f"{field}: the folder {str(folder)!r} that the sink writes in {where}; nothing was sent")
        tempfile.TemporaryFile(dir=above).close()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ValueError(f"{field}: the folder {str(folder)!r} that the sink writes in cannot be written ({reason}); "
                         "nothing was sent") from None  # fmt: skip
