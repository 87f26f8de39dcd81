"""An operation abandoned at a server stop while its checkpoint save was writing its hidden partial: once the save
ended (the server's process lives on: a notebook, a test), its checkpoint lay whole in the checkpoint folder, never
journaled, never listed, until the next start removed it (GBs on a real model). Now the files of a checkpoint an
abandoned operation saved are removed as it ends; a restart lists nothing and has nothing to clear."""

import logging
import threading

import pytest
from fastapi.testclient import TestClient

from rlnb import wire
from rlnb.engine import checkpoint_files
from rlnb.server import stopping
from rlnb.server.app import create_app
from rlnb.server.owner import OWNER
from tests.support.server import DEADLINE, new_session, submit

pytestmark = pytest.mark.slow  # a merged model's save and two servers' starts and stops: seconds on a loaded machine


def _server(state) -> TestClient:
    return TestClient(create_app(device="cpu", state_dir=state), base_url="http://testserver/v1/rl")


@pytest.fixture
def held_save(monkeypatch):
    """Saves stop after writing their partial until ``gate.set()``; ``inside`` is set once one has."""
    gate, inside = threading.Event(), threading.Event()
    real = checkpoint_files.fsync

    def slow(path):
        if path.name.endswith(".partial"):
            inside.set()
            gate.wait(DEADLINE)
        return real(path)

    monkeypatch.setattr(checkpoint_files, "fsync", slow)
    monkeypatch.setattr(stopping, "STOP_DEADLINE", 0.05)  # the save is abandoned at once
    return gate, inside


@pytest.mark.parametrize("kind", ["inference-checkpoint", "training-checkpoint"])
def test_a_checkpoint_an_abandoned_operation_saved_after_the_stop_is_removed(tmp_path, held_save, caplog, kind):
    gate, inside = held_save
    state = tmp_path / "state"
    folder = state / "checkpoints"
    with _server(state) as c:
        registry = c.app.state.registry
        _, sid = new_session(c)
        op = submit(c, sid, kind)["id"]
        assert inside.wait(DEADLINE)
    said = f"{kind} operation {op} of session {sid}"
    assert registry.abandoned == [stopping.Abandoned(said, wire.OperationStatus.FAILED)]
    gate.set()
    assert registry.settle(DEADLINE)  # the abandoned save has ended, its session's backend let go
    assert sorted(p.name for p in folder.iterdir()) == [OWNER]  # no checkpoint: the folder's mark alone
    with caplog.at_level(logging.WARNING, logger="rlnb"), _server(state) as c:
        assert c.get("/checkpoints").json()["data"] == []
        view = c.get(f"/training-sessions/{sid}").json()
        assert view["inference_checkpoints"] == [] and view["training_checkpoints"] == []
        assert c.get(f"/training-sessions/{sid}/operations/{kind}/{op}").json()["error"]["code"].endswith("NOT_ACTIVE")
    assert not [r for r in caplog.records if "removed" in r.getMessage()]  # nothing left for the restart to clear
