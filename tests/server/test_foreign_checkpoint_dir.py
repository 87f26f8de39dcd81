"""A ``checkpoint_dir`` inside another server's state folder is refused at the start: server B saving into server
A's ``STATE/checkpoints`` had its checkpoints removed by A's next restart, as checkpoints A never journaled."""

import re

import pytest

from rlnb.server.settings import ServerSettings
from rlnb.server.state import Journal
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
