"""``updated_at`` tells when an object last changed: a model resource's moves with its ``expires_at`` (extend-expiry,
activity), a session's with its status, ``step``, ``policy_state`` and checkpoints. Both stayed where they were."""

import pytest

from rlnb import samples, wire
from tests.support.server import Clock, app_client, new_session, running, submit, wait

CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"updated at"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()


def at(seconds: float) -> object:
    """A timestamp to the millisecond (``pytest.approx``'s default tolerance is relative: ~30 min at today's)."""
    return pytest.approx(seconds, abs=1e-3)


def resource(body: dict) -> wire.ModelResources:
    return wire.ModelResources.model_validate(body)


def test_a_resources_updated_at_moves_with_its_expiry(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock) as c:
        made = resource(c.post("/model-resources", json={"base_model": "rlnb/tiny", "inactive_timeout": 600}).json())
        assert made.updated_at == made.created_at
        clock.now += 100
        extend = f"/model-resources/{made.id}/extend-expiry"
        extended = resource(c.post(extend, json={"seconds": 3600}).json())
        assert extended.updated_at.timestamp() == at(clock.now) and extended.expires_at > made.expires_at
        assert resource(c.get(f"/model-resources/{made.id}").json()) == extended
        clock.now += 100
        same = resource(c.post(extend, json={"seconds": 60}).json())  # expires_at stays: nothing changed
        assert same.updated_at == extended.updated_at and same.expires_at == extended.expires_at
        clock.now += 100
        sid = running(c, c.post("/training-sessions", json={"model_resources_id": made.id}).json()["id"])["id"]
        assert resource(c.get(f"/model-resources/{made.id}").json()) == extended  # activity: 600 s on, still earlier
        c.post(f"/training-sessions/{sid}/stop")
        clock.now += 3000
        c.post("/training-sessions", json={"model_resources_id": made.id})  # 600 s on reaches past the extension
        touched = resource(c.get(f"/model-resources/{made.id}").json())
        assert touched.updated_at.timestamp() == at(clock.now) and touched.expires_at > extended.expires_at


def test_a_sessions_updated_at_moves_with_its_step_policy_checkpoints_and_status(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock) as c:
        _, sid = new_session(c)

        def updated_after(kind: str, body: dict | None = None) -> float:
            clock.now += 10
            env = wait(c, sid, kind, submit(c, sid, kind, body)["id"])
            assert env["status"] == wire.OperationStatus.COMPLETED, env
            return wire.Session.model_validate(c.get(f"/training-sessions/{sid}").json()).updated_at.timestamp()

        created = wire.Session.model_validate(c.get(f"/training-sessions/{sid}").json()).updated_at.timestamp()
        assert updated_after("forward-backward", CE) == created  # the session's own fields stay as they are
        assert updated_after("optim-step", {}) == at(clock.now)  # step 0 -> 1
        assert c.get(f"/training-sessions/{sid}").json()["step"] == "1"
        sync = {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}
        assert updated_after("weights-sync", sync) == at(clock.now)  # policy_state
        assert updated_after("training-checkpoint") == at(clock.now)  # training_checkpoints
        clock.now += 10
        stopped = wire.Session.model_validate(c.post(f"/training-sessions/{sid}/stop").json())
        assert stopped.status == wire.SessionStatus.STOPPED
        assert stopped.updated_at.timestamp() == at(clock.now)


def test_a_patch_that_changes_nothing_leaves_updated_at(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock) as c:
        _, sid = new_session(c)

        def patched(body: dict) -> wire.Session:
            clock.now += 10
            r = c.patch(f"/training-sessions/{sid}", json=body)
            assert r.status_code == 200, r.text
            return wire.Session.model_validate(r.json())

        created = patched({}).updated_at.timestamp()  # nothing asked, nothing changed
        assert patched({"display_name": None, "metadata": None}).updated_at.timestamp() == created
        named = patched({"display_name": "run"})
        assert named.display_name == "run" and named.updated_at.timestamp() == at(clock.now)
        assert patched({"display_name": "run"}).updated_at == named.updated_at  # the same name again
        assert patched({"display_name": ""}).updated_at.timestamp() == at(clock.now)  # cleared: a change
