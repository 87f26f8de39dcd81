"""What a killed ``rlnb serve --state-dir`` left in its checkpoint folder is cleared at the restart: a checkpoint saved
whole (renamed into place) but never journaled stayed there for ever, never listed, never removed (GBs on a real
model); a partial of a save cut short stayed until some session opened the folder (a restart opens none)."""

import logging
import subprocess

from fastapi.testclient import TestClient

from rlnb.engine import checkpoint_files
from rlnb.server.app import create_app
from tests.support.server import new_session, submit, wait


def _dead_pid() -> int:
    with subprocess.Popen(["true"]) as ended:
        pass
    return ended.pid


def _server(state, **settings) -> TestClient:
    return TestClient(create_app(device="cpu", state_dir=state, **settings), base_url="http://testserver/v1/rl")


def _killed_mid_save(folder) -> list:
    """What a server killed between a save's rename and its journal line, and one killed mid-save, leave."""
    unjournaled = folder / "ckpt-infer-0123456789ab"
    (unjournaled / "merged").mkdir(parents=True)
    (unjournaled / "merged" / "model.safetensors").write_bytes(b"weights")
    (folder / "ckpt-train-0123456789ab.pt").write_bytes(b"weights")
    partial = folder / f".ckpt-infer-00000000cafe.{checkpoint_files._HOST}-{_dead_pid()}-0badc0de.partial"
    partial.mkdir()
    (folder / "notes.txt").write_text("the user's")  # no checkpoint's name: never touched
    return [unjournaled, folder / "ckpt-train-0123456789ab.pt", partial]


def test_a_restart_removes_the_checkpoints_a_killed_server_never_journaled_and_its_partials(tmp_path, caplog):
    state = tmp_path / "state"
    with _server(state) as c:
        _, sid = new_session(c)
        kept = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
        cid = kept["output"]["checkpoint"]["id"]
    left = _killed_mid_save(state / "checkpoints")
    with caplog.at_level(logging.WARNING, logger="rlnb"), _server(state) as c:
        assert [ck["id"] for ck in c.get("/checkpoints").json()["data"]] == [cid]
        merged = {"variant": "CHECKPOINT_VARIANT_MERGED"}
        assert c.get(f"/checkpoints/{cid}/download", params=merged).status_code == 200  # a journaled one: kept whole
    assert not any(p.exists() for p in left), [p for p in left if p.exists()]
    assert (state / "checkpoints" / "notes.txt").read_text() == "the user's"
    said = [r.getMessage() for r in caplog.records if "removed" in r.getMessage()]
    assert len(said) == 2 and all("before it was journaled" in line for line in said), said
    assert {str(left[0]), str(left[1])} == {line.split()[3].rstrip(",") for line in said}


def test_in_a_checkpoint_dir_the_user_named_an_unjournaled_checkpoint_is_named_and_kept(tmp_path, caplog):
    state, folder = tmp_path / "state", tmp_path / "mine"
    with _server(state, checkpoint_dir=folder) as c:
        assert c.get("/checkpoints").status_code == 200  # the journal made
    unjournaled, training, partial = _killed_mid_save(folder)
    with caplog.at_level(logging.WARNING, logger="rlnb"), _server(state, checkpoint_dir=folder) as c:
        assert c.get("/checkpoints").json()["data"] == []
    assert unjournaled.exists() and training.exists() and not partial.exists()  # another program's, maybe
    said = [r.getMessage() for r in caplog.records if "no checkpoint of its journal" in r.getMessage()]
    assert sorted(line.split()[2] for line in said) == sorted([str(unjournaled), str(training)]), said
