"""``POST /model-resources/{id}/stop?force=true`` while a session of it is STOPPING (its model still being built, or
an operation of it running): the resource answered STOPPED at once, its session still STOPPING. The reference's
ModelResourcesStatus has STOPPING for this: the resource says STOPPING until its sessions have ended, then
STOPPED (GET shows the move)."""

import threading
import time

import pytest

from rlnb import wire
from rlnb.server import sessions as sessions_module
from rlnb.server import stopping
from tests.support.server import DEADLINE, app_client, running

STOPPING, STOPPED = wire.ModelResourcesStatus.STOPPING, wire.ModelResourcesStatus.STOPPED


@pytest.fixture
def gate(monkeypatch):
    """Builds wait for ``gate.set()`` (up to ``DEADLINE``): a slow model load, held open by the test."""
    gate = threading.Event()
    real = sessions_module.make_backend

    def slow(*args, **kwargs):
        gate.wait(DEADLINE)
        return real(*args, **kwargs)

    monkeypatch.setattr(sessions_module, "make_backend", slow)
    return gate


def _status_until(c, path: str, wanted: str) -> str:
    """The object's status once it is ``wanted`` (or what it still is after ``DEADLINE`` s)."""
    deadline = time.monotonic() + DEADLINE
    while (status := c.get(path).json()["status"]) != wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    return status


def test_a_forced_stop_is_stopping_until_its_sessions_have_ended_then_stopped(tmp_path, gate):
    with app_client(tmp_path) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"]
        refused = c.post(f"/model-resources/{rid}/stop")
        assert refused.status_code == 409 and refused.json()["error"]["param"] == "force"
        stopped = c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).json()
        assert stopped["status"] == STOPPING and stopped["expires_at"] is None
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPING
        assert c.get(f"/model-resources/{rid}").json()["status"] == STOPPING
        listed = c.get("/model-resources", params={"status": STOPPING}).json()["data"]
        assert [r["id"] for r in listed] == [rid]
        again = c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).json()
        assert again["status"] == STOPPING  # a second stop changes nothing
        assert c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": 600}).status_code == 409
        gate.set()
        assert _status_until(c, f"/training-sessions/{sid}", wire.SessionStatus.STOPPED) == wire.SessionStatus.STOPPED
        assert _status_until(c, f"/model-resources/{rid}", STOPPED) == STOPPED
        assert c.get(f"/model-resources/{rid}").json()["updated_at"] >= stopped["updated_at"]


def test_a_stop_with_idle_sessions_only_is_stopped_at_once(tmp_path):
    with app_client(tmp_path) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])["id"]
        stopped = c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).json()
        assert stopped["status"] == STOPPED
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPED


def test_a_build_that_fails_after_a_forced_stop_still_ends_the_resource_stopped(tmp_path, monkeypatch):
    gate = threading.Event()

    def failing(*args, **kwargs):
        gate.wait(DEADLINE)
        raise MemoryError("out of memory")

    monkeypatch.setattr(sessions_module, "make_backend", failing)
    with app_client(tmp_path) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"]
        assert c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).json()["status"] == STOPPING
        gate.set()
        assert _status_until(c, f"/training-sessions/{sid}", wire.SessionStatus.STOPPED) == wire.SessionStatus.STOPPED
        assert _status_until(c, f"/model-resources/{rid}", STOPPED) == STOPPED


def test_a_resource_still_stopping_when_the_server_stopped_is_stopped_after_the_restart(tmp_path, gate, monkeypatch):
    monkeypatch.setattr(stopping, "STOP_DEADLINE", 0.05)  # the build is abandoned at once
    state = tmp_path / "state"
    with app_client(tmp_path, state_dir=state) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"]
        assert c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).json()["status"] == STOPPING
    with app_client(tmp_path, state_dir=state) as c:
        assert c.get(f"/model-resources/{rid}").json()["status"] == STOPPED
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPED
    gate.set()
