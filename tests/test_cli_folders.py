"""``rlnb serve --state-dir`` / ``--checkpoint-dir`` naming a symbolic link whose target is not there: refused with
one line that says so, not "File exists" (the link is there, the folder it names is not)."""

import os
import sys

import pytest

from rlnb.cli import main


@pytest.fixture(autouse=True)
def never_serve(monkeypatch):
    """A bad folder must stop ``rlnb serve`` before it listens: a test that reached uvicorn would hang."""
    monkeypatch.setattr("rlnb.server.app.run", lambda *a, **k: pytest.fail("rlnb serve started listening"))


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
@pytest.mark.parametrize("option", ["--state-dir", "--checkpoint-dir"])
@pytest.mark.parametrize("target", ["missing/folder", "loop"])
@pytest.mark.parametrize("under", ["", "sub"])
def test_a_folder_option_on_a_link_to_nothing_names_the_link_and_its_target(option, target, under, tmp_path, capsys):
    """A link whose target was removed (a mount not there yet, a folder renamed) or that points at itself, or a
    folder under one: the state dir said "cannot keep the server's state in L: [Errno 17] File exists", the
    checkpoint dir "cannot hold checkpoints: File exists", though nothing but the link was there."""
    link = tmp_path / "link"
    os.symlink(tmp_path / ("link" if target == "loop" else target), link)
    path = link / under if under else link
    assert main(["serve", "--device", "cpu", "--port", "0", option, str(path)]) == 2
    err = capsys.readouterr().err
    said = f"rlnb serve: {option} {str(path)!r}: {link} is a link to {os.readlink(link)!r}, which does not exist"
    assert err.startswith(said) and err.count("\n") == 1, err
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("option", ["--state-dir", "--checkpoint-dir"])
@pytest.mark.parametrize(("kind", "under"), [("a file", ""), ("a named pipe", ""), ("a file", "sub")])
def test_a_folder_option_on_a_file_or_a_pipe_says_so(option, kind, under, tmp_path, capsys):
    """A plain file or a named pipe given as the folder (or a path under a file): the state dir said "cannot keep the
    server's state in X: [Errno 17] File exists", not that X is no folder."""
    there = tmp_path / "x"
    if kind == "a file":
        there.write_text("mine\n")
    else:
        os.mkfifo(there)
    path = there / under if under else there
    assert main(["serve", "--device", "cpu", "--port", "0", option, str(path)]) == 2
    err = capsys.readouterr().err
    where = f"is under {str(there)!r}, {kind}" if under else f"is {kind}"
    said = f"rlnb serve: {option} {str(path)!r} {where}: "
    assert err.startswith(said) and err.count("\n") == 1, err
    assert there.is_fifo() or there.read_text() == "mine\n"
