"""The folder each sink writes in, checked when the sink is made: a file in its place, or a folder that cannot be
written, is a ``ValueError`` naming the argument (or variable) and the folder, before anything is sent."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from rlnb import sinks
from rlnb.sinks.base import Sink
from tests.sinks.test_sinks import ROOT, env, pytestmark  # noqa: F401 - env: every library's state under a temp folder

MAKERS: dict[str, tuple[str, Callable[[Path], Sink]]] = {  # the field named, and the sink writing under ``where``
    "tensorboard": ("TensorBoard.logdir", lambda where: sinks.TensorBoard(where)),
    "mlflow": ("MLflow.tracking_uri", lambda where: sinks.MLflow(where / "m.db", process=True)),
    "wandb": ("WandB.dir", lambda where: sinks.WandB("p", dir=where.parent, process=True)),  # it writes in <dir>/wandb
    "trackio": ("$TRACKIO_DIR", lambda where: sinks.Trackio("p", process=True)),  # process: Trackio not imported
}
"""``process=True``: the library is not imported in this process (a fast test); the folder is checked all the same."""


def _unwritable(tmp_path: Path) -> Path:
    """A folder that cannot be written: one without write permission, or, for root (which writes anywhere on a disk),
    one under ``/sys``, a file system of the kernel's."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        return locked
    return Path("/sys/rlnb-sinks-test")


@pytest.mark.parametrize("library", list(MAKERS))
def test_a_sinks_folder_that_is_a_file_or_cannot_be_written_is_refused_when_the_sink_is_made(
    library, tmp_path, monkeypatch
):
    """A file where the sink's folder goes (or above it), or a folder that cannot be written: the sink was made, and
    dropped at the run's first point with a bare ``[Errno 17] File exists`` (Trackio's ``$TRACKIO_DIR`` too). Now it
    is a ``ValueError`` when the sink is made, naming what set the folder, the folder, and why."""
    field, make = MAKERS[library]
    (tmp_path / "a").mkdir()
    for file in (tmp_path / "a" / "wandb", tmp_path / "file"):
        file.write_text("not a folder")
    places = {  # each named wandb, W&B's folder in its dir
        "is a file": tmp_path / "a" / "wandb",
        f"is under '{tmp_path / 'file'}', a file": tmp_path / "file" / "wandb",
        "cannot be written": _unwritable(tmp_path) / "wandb",
    }
    for why, where in places.items():
        monkeypatch.setenv("TRACKIO_DIR", str(where))
        said = f"{field}: the folder '{where}' that the sink writes in {why}"
        with pytest.raises(ValueError, match=rf"^{re.escape(said)}.*; nothing was sent$"):
            make(where)
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "fine" / "wandb"))
    assert make(tmp_path / "fine" / "wandb").error is None
    assert not (tmp_path / "fine").exists()  # looked at, not made


@pytest.mark.slow  # a Python process that imports Trackio
def test_a_trackio_dir_that_is_a_file_is_refused_before_a_session_sends_anything(tmp_path):
    """``TRACKIO_DIR`` set to a file before Trackio is imported (as Trackio reads it once): the sink was made, the
    session ran, and the sink was dropped at the first point with ``FileExistsError``. Now making the sink raises,
    naming the variable and the folder, before a session starts."""
    (tmp_path / "file").write_text("not a folder")
    script = textwrap.dedent("""
        import rlnb
        from rlnb import sinks
        try:
            sinks.Trackio("p")
        except ValueError as exc:
            print("REFUSED", exc)
        else:
            print("MADE")
    """)
    variables = {**os.environ, "TRACKIO_DIR": str(tmp_path / "file"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=variables, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = f"REFUSED $TRACKIO_DIR (as Trackio read it when first imported): the folder '{tmp_path / 'file'}' that"
    assert done.stdout.startswith(said), done.stdout + done.stderr[-3000:]
