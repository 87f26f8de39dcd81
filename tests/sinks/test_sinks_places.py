"""The place each sink writes in, checked when the sink is made: a file where its folder goes, or a folder that cannot
be written, is a ``ValueError`` naming the argument (or variable) and the folder, before anything is sent; so is a
project's name that the library refuses. Two spellings of one Trackio project are one place."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rlnb
from rlnb import sinks
from rlnb.sinks import stream
from rlnb.testing import FakeBackend
from tests.support import sink_readers as read
from tests.support.sink_tests import CE, MAKERS, ROOT, env, pytestmark  # noqa: F401 - env: every library's state in a temp folder


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


def test_a_wandb_project_name_wandb_refuses_is_refused_when_the_sink_is_made():
    """W&B refuses a project named with ``/ \\ # ? % :`` or past 128 characters, in ``wandb.init``: at the run's first
    point, which dropped the sink once training had started. It is a ``ValueError`` naming the rule, at once."""
    for project in ("team/project", "a:b", "50%", "x" * 129, ""):
        with pytest.raises(ValueError, match=r"^WandB\.project = .* is invalid: must be a name of 1 to 128 characters "
                                             r"without any of / \\ # \? % : \(W&B refuses it\)$"):  # fmt: skip
            sinks.WandB(project, process=True)
    assert sinks.WandB("my project é", process=True).project == "my project é"


def test_trackio_projects_trackio_keeps_as_one_are_one_place():
    """Trackio keeps ``my.model`` and ``mymodel`` in one database (its letters, digits, ``-`` and ``_``): two sinks
    of those projects wrote a run of one name into it twice. They are refused as one place, as two of one name are."""
    with pytest.raises(ValueError, match=r"sinks\[1\] writes where sinks\[0\] does \(Trackio\(project='mymodel'\)\)"):
        stream.validate([sinks.Trackio("my.model", process=True), sinks.Trackio("mymodel", process=True)])
    apart = [sinks.Trackio("my.model", process=True), sinks.Trackio("my-model", process=True)]
    assert stream.validate(apart) == apart


@pytest.mark.slow  # imports Trackio
def test_trackio_project_names_are_kept_as_trackio_keeps_them_and_its_reserved_ones_refused():
    """rlnb's spelling of a project as Trackio keeps it on disk (without importing Trackio, for a sink writing from its
    child) is Trackio's own; a name Trackio refuses in ``trackio.init`` (``registry-...``, a table file's ending) was
    refused at the run's first point, dropping the sink: it is a ``ValueError`` when the sink is made."""
    from trackio.utils import canonical_project_name

    from rlnb.sinks.trackio import canonical

    for project in ("my.model", "a/b c", "!!!", "é-ß_1", "x ", " . ", "日本", "a\u00a0b", "Ⅻ"):
        assert canonical(project) == canonical_project_name(project), project
    with pytest.raises(ValueError, match=r"^Trackio\.project = 'registry-x' is invalid: Project name 'registry-x'"):
        sinks.Trackio("registry-x")


@pytest.mark.slow  # imports Trackio; a sink's child process
def test_a_trackio_dir_set_after_trackio_was_imported_is_said_and_a_child_process_writes_there(tmp_path, monkeypatch):
    """Trackio reads ``$TRACKIO_DIR`` once, when first imported: set later (a notebook's next cell), the sink wrote the
    run where it pointed before, and said nothing. A ``SinkWarning`` at the sink's line says where Trackio writes and
    how to write where the variable points now: ``process=True``, whose child imports Trackio anew, writes there."""
    import trackio.utils

    moved = tmp_path / "moved"
    monkeypatch.setenv("TRACKIO_DIR", str(moved))
    said = rf"Trackio writes project 'p' in {re.escape(str(trackio.utils.TRACKIO_DIR))}, where \$TRACKIO_DIR pointed .*"
    with pytest.warns(sinks.SinkWarning, match=said + "pass process=True") as caught:
        sinks.Trackio("p")
    assert caught[0].filename == __file__
    child = sinks.Trackio("p", process=True, interval=0)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[child]) as s:
        s.forward_backward(CE)
        s.optim_step().result()
    _, points, _ = read.trackio(moved / "p.db", "r")
    assert sorted(points) == [1]


def test_sink_arguments_the_library_would_refuse_at_the_first_point_are_refused_when_the_sink_is_made():
    """``WandB(entity=5)``, ``Trackio(name=...)`` (rlnb names the run: ``trackio.init`` got it twice) were taken, and
    the sink dropped at the run's first point, once training had started. Each is an error naming the argument."""
    with pytest.raises(ValueError, match=r"^WandB\.entity = 5 is invalid: must be a W&B user or team name, or None"):
        sinks.WandB("p", entity=5, process=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Trackio's config=, name= is rlnb's to give: one Trackio run per rlnb run"):
        sinks.Trackio("p", name="mine", config={}, process=True)
    assert sinks.WandB("p", entity="team", process=True).entity == "team"


@pytest.mark.parametrize("make", [sinks.TensorBoard, sinks.MLflow, sinks.Trackio, lambda **kw: sinks.WandB("p", **kw)])
def test_a_process_that_is_not_a_bool_is_refused_when_the_sink_is_made(make):
    """``process="no"`` is truthy: the library ran in a child process, as if asked."""
    with pytest.raises(ValueError, match=r"^(TensorBoard|MLflow|Trackio|WandB)\.process must be True or False, got"):
        make(process="no")


@pytest.mark.slow  # imports Trackio
def test_an_option_trackio_init_does_not_take_is_refused_when_the_sink_is_made():
    """``Trackio("p", sapce_id=...)``: ``trackio.init`` raised ``TypeError`` at the run's first point, dropping the
    sink. It is a ``TypeError`` naming the option when the sink is made (in-process: a child imports Trackio later)."""
    with pytest.raises(TypeError, match=r"^Trackio got 'sapce_id', which trackio\.init does not take"):
        sinks.Trackio("p", sapce_id="me/space")
    assert sinks.Trackio("p", embed=False, webhook_min_level="error").error is None
