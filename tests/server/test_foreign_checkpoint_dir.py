"""A ``checkpoint_dir`` inside another server's state folder is refused at the start: server B saving into server
A's ``STATE/checkpoints`` had its checkpoints removed by A's next restart, as checkpoints A never journaled. The reverse
order too: a state folder whose ``checkpoints`` another server was given as its ``checkpoint_dir`` (a mark in the
folder, ``owner.OWNER``, says whose it is)."""

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rlnb.cli import main
from rlnb.server import create_app
from rlnb.server.owner import OWNER
from rlnb.server.settings import ServerSettings
from rlnb.server.state import Journal, StateDirError
from tests.support.server import app_client


def test_another_servers_checkpoint_folder_is_refused_naming_both(tmp_path):
    with app_client(tmp_path / "a-ckpt", state_dir=tmp_path / "a"):  # server A, holding its state folder
        mine = (tmp_path / "a" / "checkpoints").resolve()
        state = (tmp_path / "a").resolve()
        said = f"checkpoint_dir {mine} is the checkpoint folder of {state}, the state folder of another rlnb serve"
        with pytest.raises(ValueError, match=re.escape(said)):
            ServerSettings(checkpoint_dir=mine, state_dir=tmp_path / "b")
    with pytest.raises(ValueError, match=re.escape(said)):  # A stopped: its restart would remove them all the same
        ServerSettings(checkpoint_dir=mine)


@pytest.mark.parametrize("folder", ["a/checkpoints", "a", "a/checkpoints/mine", "a/other", "elsewhere/checkpoints"])
def test_what_no_restart_clears_is_taken(tmp_path, folder):
    """Its own state folder's, and folders a restart of A never clears (the state folder itself, below or beside its
    ``checkpoints``): a state folder may well be a project's root."""
    Journal(tmp_path / "a").close()  # a state folder that has been used
    own = "a" if folder == "a/checkpoints" else "b"
    settings = ServerSettings(checkpoint_dir=tmp_path / folder, state_dir=tmp_path / own)
    assert settings.checkpoint_dir == tmp_path / folder


# -- the reverse order: a state folder whose checkpoints folder another server was given as its checkpoint_dir --------

PLANTED = "ckpt-infer-0123456789ab"
"""A checkpoint's name: what a start clears from its own checkpoint folder when its journal does not list it."""


def test_a_state_folder_whose_checkpoints_another_server_was_given_is_refused_naming_both(tmp_path):
    """Server A ran with ``checkpoint_dir S/checkpoints``; server B started with ``state_dir S`` and removed A's
    checkpoints at once, as checkpoints its journal never listed."""
    folder = tmp_path / "s" / "checkpoints"
    with app_client(folder, state_dir=tmp_path / "a"):  # server A
        (folder / PLANTED).mkdir()  # one of A's checkpoints
        a = (tmp_path / "a").resolve()
        said = f"{folder.resolve()} is the checkpoint_dir of another rlnb serve (its state folder {a})"
        with pytest.raises(StateDirError, match=re.escape(said)):
            create_app(device="cpu", state_dir=tmp_path / "s")  # server B, while A runs
    with pytest.raises(StateDirError, match=re.escape(said)):  # A stopped: B's start would remove them all the same
        create_app(device="cpu", state_dir=tmp_path / "s")
    assert (folder / PLANTED).is_dir()
    Journal(tmp_path / "s").close()  # the refusal left the state folder unlocked


def test_the_server_that_named_its_own_checkpoints_folder_starts_without_naming_it(tmp_path):
    """Its own ``S/checkpoints`` named as its ``checkpoint_dir``, then a folder elsewhere, then none: each start is
    taken (a refusal raises at ``create_app``) and serves, and each folder's mark says it is S's."""
    state = tmp_path / "s"
    mine = {"state_dir": str(state.resolve())}

    def started(client: TestClient, folder: Path, named: bool) -> None:
        with client:
            assert client.get("http://testserver/health").json() == {"status": "ok"}
        assert json.loads((folder / OWNER).read_text()) == {"named": named, **mine}

    started(app_client(state / "checkpoints", state_dir=state), state / "checkpoints", named=True)
    started(app_client(tmp_path / "elsewhere", state_dir=state), tmp_path / "elsewhere", named=True)
    assert json.loads((state / "checkpoints" / OWNER).read_text()) == {"named": True, **mine}  # untouched
    started(TestClient(create_app(device="cpu", state_dir=state)), state / "checkpoints", named=False)


def test_a_server_without_a_state_folder_named_it_too(tmp_path, capsys):
    """From the command line: one line naming both, exit 2, no traceback."""
    folder = tmp_path / "s" / "checkpoints"
    with app_client(folder):
        pass
    assert main(["serve", "--device", "cpu", "--port", "0", "--state-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    said = f"is the checkpoint_dir of another rlnb serve (without a state folder), as {folder.resolve() / OWNER} says"
    assert err.startswith(f"rlnb serve: --state-dir: {folder.resolve()} ") and said in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_checkpoint_folder_its_state_folder_marks_as_its_own_is_refused_without_its_journal(tmp_path):
    """The forward order, told by the mark alone: the state folder's lock and journal gone (deleted by hand), its next
    start would still clear the folder."""
    with TestClient(create_app(device="cpu", state_dir=tmp_path / "a")):
        pass
    for name in ("registry.jsonl", "state.lock"):
        (tmp_path / "a" / name).unlink()
    mine = (tmp_path / "a" / "checkpoints").resolve()
    said = f"checkpoint_dir {mine} is the checkpoint folder of {mine.parent}, the state folder of another rlnb serve"
    with pytest.raises(ValueError, match=re.escape(said)):
        create_app(device="cpu", checkpoint_dir=mine)


@pytest.mark.parametrize("text", ["", "{", '{"named": "yes"}', "[]", "\xff"])
def test_a_damaged_mark_is_written_again(tmp_path, text):
    folder = tmp_path / "s" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / OWNER).write_bytes(text.encode("latin-1"))
    with TestClient(create_app(device="cpu", state_dir=tmp_path / "s")):
        pass
    assert json.loads((folder / OWNER).read_text()) == {"named": False, "state_dir": str((tmp_path / "s").resolve())}
