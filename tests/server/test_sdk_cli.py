"""The official SDK's command line (``together training ...``, together 3.1.1) reads ``rlnb serve``'s model resources,
sessions and checkpoints, as docs/server.md says: with ``TOGETHER_PROJECT_ID`` set, since without it the command
line first asks ``/v3/whoami``, outside the RL API."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("together")

from tests.support.server import DEADLINE  # noqa: E402

# slow: an `rlnb serve` subprocess and the SDK's command line, a few seconds of imports per call
pytestmark = pytest.mark.slow

CLI = shutil.which("together", path=str(Path(sys.executable).parent))


def together(server: str, tmp_path: Path, *args: str) -> Any:
    env = {
        "TOGETHER_BASE_URL": server,
        "TOGETHER_API_KEY": "any-key-123",
        "TOGETHER_PROJECT_ID": "any-project",
        "HOME": str(tmp_path),  # no stored login or config of this machine's user
        "PATH": str(Path(sys.executable).parent),
    }
    assert CLI is not None, "the together package installs a `together` command next to python"
    done = subprocess.run(
        [CLI, "--non-interactive", "--json", *args], capture_output=True, text=True, env=env, timeout=DEADLINE
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_training_commands_list_and_get_what_the_server_holds(server: str, tmp_path: Path):
    with httpx.Client(base_url=f"{server}/v1/rl", timeout=DEADLINE) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = c.post("/training-sessions", json={"model_resources_id": rid, "display_name": "cli"}).json()["id"]
    assert rid in [r["id"] for r in together(server, tmp_path, "training", "ls-resources")["data"]]
    sessions = together(server, tmp_path, "training", "ls-sessions")["data"]
    assert {"id": sid, "display_name": "cli"}.items() <= next(s for s in sessions if s["id"] == sid).items()
    assert together(server, tmp_path, "training", "ls-checkpoints")["data"] == []
    got = together(server, tmp_path, "training", "get", sid)
    assert got["kind"] == "training_session" and got["data"]["model_resources_id"] == rid
