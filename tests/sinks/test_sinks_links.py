"""A sink's folder under a symbolic link to nothing (its target removed or not mounted yet, or links that loop): the
sink was made, and dropped at the run's first point with a bare "[Errno 17] File exists". Now making it is a
``ValueError`` naming what set the folder, the link and its target."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.support.sink_tests import MAKERS, env, pytestmark  # noqa: F401 - env: every library's state in a temp folder


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
@pytest.mark.parametrize("target", ["gone", "loop"])
@pytest.mark.parametrize("library", list(MAKERS))
def test_a_sinks_folder_under_a_link_to_nothing_is_refused_when_the_sink_is_made(
    library, target, tmp_path, monkeypatch
):
    field, make = MAKERS[library]
    link = tmp_path / "link"
    link.symlink_to(link if target == "loop" else tmp_path / "gone")
    where = link / "wandb"
    monkeypatch.setenv("TRACKIO_DIR", str(where))
    said = f"{field} '{where}': {link} is a link to {os.readlink(link)!r}, which does not exist"
    with pytest.raises(ValueError, match=rf"^{re.escape(said)}.*; nothing was sent$"):
        make(where)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link"]
