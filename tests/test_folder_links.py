"""A folder option naming a symbolic link to nothing (its target removed or not mounted yet, or links that loop), or a
path through one: ``mkdir(exist_ok=True)`` said "[Errno 17] File exists", naming neither the option nor the link,
and some only once a model had loaded. Each is now a ``ValueError`` naming the option, the link and its target,
before anything is made or started (``rlnb._input.checks.refuse_dangling_link``)."""

import os
import re
import sys
from pathlib import Path

import pytest

import rlnb
from rlnb.cli import main
from rlnb.engine.options import CheckpointOptions
from rlnb.remote.downloads import check_folder
from rlnb.server import create_app
from rlnb.sweep import sweep

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")


@pytest.fixture(params=["missing", "loop"])
def link(request, tmp_path) -> Path:
    """``tmp_path/link``: to a folder that is not there, or to itself."""
    made = tmp_path / "link"
    made.symlink_to(made if request.param == "loop" else tmp_path / "gone" / "folder")
    return made


def said(name: str, path: Path, link: Path) -> str:
    return re.escape(f"{name} {str(path)!r}: {link} is a link to {os.readlink(link)!r}, which does not exist")


def untouched(link: Path) -> None:
    """Nothing was made beside the link, nor where it points."""
    assert sorted(p.name for p in link.parent.iterdir()) == ["link"]


@pytest.mark.parametrize("under", ["", "sub"])
@pytest.mark.parametrize("name", ["state_dir", "checkpoint_dir"])
def test_a_server_folder_on_a_link_to_nothing_is_refused_by_create_app(link, under, name):
    """``create_app(state_dir=...)``: "StateDirError: cannot keep the server's state in L: [Errno 17] File exists";
    ``checkpoint_dir``: taken, and each session's start failed later."""
    path = link / under if under else link
    with pytest.raises(ValueError, match=said(name, path, link)):
        create_app(device="cpu", **{name: path})
    untouched(link)


@pytest.mark.parametrize("under", ["", "sub"])
def test_a_local_checkpoint_dir_on_a_link_to_nothing_is_refused(link, under):
    """``checkpoint_dir=`` of a local session (``CheckpointOptions``): "cannot hold checkpoints: File exists"."""
    path = link / under if under else link
    with pytest.raises(ValueError, match=said("checkpoint_dir", path, link)):
        CheckpointOptions(checkpoint_dir=path)
    untouched(link)


def test_a_sweeps_runs_dir_on_a_link_to_nothing_is_refused_before_a_trial(link):
    """``sweep(..., runs_dir=L)``: "FileExistsError: [Errno 17] File exists: L", naming no argument."""
    with pytest.raises(ValueError, match=said("runs_dir", link, link)):
        sweep(rlnb.AdamParams(learning_rate=1e-3), steps=1, runs_dir=link, progress=False)
    untouched(link)


@pytest.mark.parametrize("under", ["", "sub"])
def test_a_download_folder_on_a_link_to_nothing_is_refused_before_sending(link, under):
    """``download_checkpoint(id, L)``: the URLs were fetched, then "[Errno 17] File exists" from ``mkdir``."""
    path = link / under if under else link
    with pytest.raises(ValueError, match=said("folder", path, link)):
        check_folder(path)
    untouched(link)


def test_a_demo_out_on_a_link_to_nothing_stops_before_the_model_loads(link, capsys, monkeypatch):
    """``rlnb demo --out L``: the model loaded, then "cannot write the demo's files in L: [Errno 17] File exists"."""
    monkeypatch.setattr("rlnb.engine.backend.LocalBackend", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["demo", "--device", "cpu", "--out", str(link)]) == 2
    err = capsys.readouterr().err
    assert re.match("rlnb demo: " + said("--out", link, link), err) and err.count("\n") == 1, err
    untouched(link)
