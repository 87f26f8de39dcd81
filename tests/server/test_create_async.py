"""``POST /training-sessions`` answers CREATING at once and builds the model on a thread (the reference's
CREATING -> RUNNING; the SDK polls GET). Building a real model inside the request outlasted the SDK's 60 s HTTP
timeout, whose retried POST could make a second session. A build that fails ends the session ERROR, its slot
freed; a stop while CREATING is STOPPING until the build ends; a server stop waits for a build with a deadline."""

import threading
import time

import pytest

from rlnb import wire
from rlnb.server import sessions as sessions_module
from rlnb.server import stopping
from rlnb.server.registry import NEVER_BUILT
from tests.support.server import DEADLINE, Clock, app_client, running, submit, wait

CREATING, RUNNING = wire.SessionStatus.CREATING, wire.SessionStatus.RUNNING


@pytest.fixture
def gate(monkeypatch):
    """Builds wait for ``gate.set()`` (up to ``DEADLINE``): a slow model load, held open by the test."""
    gate, built = threading.Event(), []
    real = sessions_module.make_backend

    def slow(*args, **kwargs):
        gate.wait(DEADLINE)
        backend = real(*args, **kwargs)
        built.append(backend)
        return backend

    monkeypatch.setattr(sessions_module, "make_backend", slow)
    gate.built = built  # type: ignore[attr-defined]
    return gate


def error_of(r, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def create(c, rid: str, **body):
    return c.post("/training-sessions", json={"model_resources_id": rid, **body})


def resource(c, **body) -> str:
    return c.post("/model-resources", json={"base_model": "rlnb/tiny", **body}).json()["id"]


def test_a_create_answers_creating_at_once_and_runs_once_built(tmp_path, gate):
    with app_client(tmp_path) as c:
        rid = resource(c)
        started = time.monotonic()
        made = create(c, rid).json()
        assert made["status"] == CREATING and time.monotonic() - started < DEADLINE / 2
        sid = made["id"]
        early = c.post(f"/training-sessions/{sid}/operations/optim-step", json={}, headers={"Idempotency-Key": "k"})
        assert error_of(early, 409)["message"].startswith(f"session {sid} is still being created")
        assert c.get(f"/training-sessions/{sid}").json()["status"] == CREATING
        gate.set()
        assert running(c, sid)["status"] == RUNNING
        assert (
            wait(c, sid, "optim-step", submit(c, sid, "optim-step")["id"])["status"]
            == "TRAINING_OPERATION_STATUS_COMPLETED"
        )


def test_cheap_refusals_are_still_4xx_at_the_post(tmp_path, gate):
    with app_client(tmp_path, full_session_cap=1) as c:
        rid = resource(c)
        assert (
            error_of(create(c, rid, resume_from_checkpoint_id="ckpt-none"), 404)["param"] == "resume_from_checkpoint_id"
        )
        assert error_of(create(c, "mr-none"), 404)["param"] == "model_resources_id"
        assert create(c, rid).json()["status"] == CREATING
        assert "1 active or stopping" in error_of(create(c, rid), 429)["message"]  # a CREATING one holds the slot
        gate.set()


def test_a_build_that_fails_ends_the_session_error_and_frees_its_slot(tmp_path, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise MemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    with app_client(tmp_path, full_session_cap=1) as c:
        rid = resource(c)
        monkeypatch.setattr(sessions_module, "make_backend", out_of_memory)
        s = running(c, create(c, rid).json()["id"])
        assert s["status"] == wire.SessionStatus.ERROR
        assert s["error"]["code"] == wire.SessionErrorCode.RESOURCE_AT_CAPACITY
        assert "(MemoryError)" in s["error"]["message"] and "20.00 GiB" in s["error"]["message"]
        monkeypatch.undo()
        assert running(c, create(c, rid).json()["id"])["status"] == RUNNING  # the slot of the cap is free


def test_a_build_that_exits_ends_the_session_error_and_frees_its_slot(tmp_path, monkeypatch):
    """A model's own code calling ``sys.exit`` (argparse, say) left the session CREATING for good, its slot held and
    nothing logged (a thread ignores SystemExit): a stop then left it STOPPING for good."""

    def exits(*args, **kwargs):
        raise SystemExit(2)

    with app_client(tmp_path, full_session_cap=1) as c:
        rid = resource(c)
        monkeypatch.setattr(sessions_module, "make_backend", exits)
        s = running(c, create(c, rid).json()["id"])
        assert s["status"] == wire.SessionStatus.ERROR, s
        assert "building the session's model failed (SystemExit)" in s["error"]["message"]
        monkeypatch.undo()
        assert running(c, create(c, rid).json()["id"])["status"] == RUNNING  # the slot of the cap is free


def test_a_damaged_checkpoint_ends_the_resumed_session_error_naming_it_by_id(tmp_path):
    with app_client(tmp_path) as c:
        rid = resource(c)
        sid = running(c, create(c, rid).json()["id"])["id"]
        ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
        for f in [f for f in tmp_path.rglob("*") if f.is_file() and ckpt["id"] in str(f)]:
            f.write_bytes(b"not a checkpoint")
        s = running(c, create(c, resource(c), resume_from_checkpoint_id=ckpt["id"]).json()["id"])
        assert s["status"] == wire.SessionStatus.ERROR and s["error"]["code"] == wire.SessionErrorCode.SESSION_FAILED
        assert ckpt["id"] in s["error"]["message"] and str(tmp_path) not in s["error"]["message"]


def test_a_stop_while_creating_is_stopping_holds_the_slot_and_lets_the_built_model_go(tmp_path, gate):
    with app_client(tmp_path, full_session_cap=1) as c:
        rid = resource(c)
        sid = create(c, rid).json()["id"]
        assert c.post(f"/training-sessions/{sid}/stop").json()["status"] == wire.SessionStatus.STOPPING
        assert create(c, rid).status_code == 429  # the model is still being built on that slot
        gate.set()
        registry = c.app.state.registry
        assert registry.settle(DEADLINE)
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPED
        assert registry.sessions[sid].backend is None and gate.built[0]._worker.closed
        assert running(c, create(c, rid).json()["id"])["status"] == RUNNING


def test_a_server_stop_waits_for_a_build_with_a_deadline_and_names_it(tmp_path, gate):
    with app_client(tmp_path) as c:
        sid = create(c, resource(c)).json()["id"]
        registry = c.app.state.registry
        started = time.monotonic()
        abandoned = registry.close(0.2)
        assert time.monotonic() - started < DEADLINE / 2
        assert abandoned == [stopping.Abandoned(f"the build of session {sid}'s model", wire.SessionStatus.ERROR)]
        assert abandoned[0].end == "its session ERROR"  # as rlnb serve says how it ends
        s = c.get(f"/training-sessions/{sid}").json()
        assert s["status"] == wire.SessionStatus.ERROR and s["error"]["message"] == NEVER_BUILT
        gate.set()
        assert registry.settle(DEADLINE) and gate.built[0]._worker.closed and registry.sessions[sid].backend is None


def test_a_session_creating_when_the_server_was_killed_is_restored_error(tmp_path, gate):
    state = tmp_path / "state"
    with app_client(tmp_path, state_dir=state) as c:
        sid = create(c, resource(c)).json()["id"]
        c.app.state.registry.journal.close()  # killed: nothing more is written
        gate.set()
    with app_client(tmp_path, state_dir=state) as c:
        s = c.get(f"/training-sessions/{sid}").json()
        assert s["status"] == wire.SessionStatus.ERROR and s["error"]["message"] == NEVER_BUILT


def test_a_resource_does_not_expire_while_a_session_model_is_built(tmp_path, gate):
    clock = Clock()
    with app_client(tmp_path, clock=clock) as c:
        sid = create(c, resource(c, inactive_timeout=300)).json()["id"]
        clock.now += 7200
        assert c.app.state.registry.reap() == 0
        assert c.get(f"/training-sessions/{sid}").json()["status"] == CREATING
        gate.set()
        assert running(c, sid)["status"] == RUNNING


@pytest.mark.slow  # LoRA: imports peft
def test_a_resume_the_checkpoints_record_refuses_is_still_a_400_at_the_post(tmp_path):
    with app_client(tmp_path) as c:
        lora = resource(c, lora_enabled=True)
        sid = running(c, create(c, lora, lora_config={"rank": 4}).json()["id"])["id"]
        ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
        before = len(c.get("/training-sessions").json()["data"])
        err = error_of(create(c, lora, resume_from_checkpoint_id=ckpt["id"], lora_config={"rank": 8}), 400)
        assert err["param"] == "resume_from_checkpoint_id" and "LoRA rank is 4, lora_config.rank is 8" in err["message"]
        err = error_of(create(c, resource(c), resume_from_checkpoint_id=ckpt["id"]), 400)
        assert "is a LoRA training checkpoint (rank 4)" in err["message"]
        assert len(c.get("/training-sessions").json()["data"]) == before  # no session was made


def test_a_build_with_no_thread_to_be_had_ends_the_session_error_and_frees_its_slot(tmp_path, monkeypatch):
    """``Thread.start`` raising "can't start new thread" (the process at its thread limit) built the model inside the
    request, the minutes-long create the SDK's retry turns into a second session: the session ends ERROR saying
    why, and its slot is free."""
    real = threading.Thread.start

    def no_thread(thread):
        if thread.name.startswith(stopping.BUILD):
            raise RuntimeError("can't start new thread")
        real(thread)

    built, make = [], sessions_module.make_backend
    monkeypatch.setattr(sessions_module, "make_backend", lambda *a, **k: built.append(make(*a, **k)) or built[-1])
    with app_client(tmp_path, full_session_cap=1) as c:
        rid = resource(c)
        monkeypatch.setattr(threading.Thread, "start", no_thread)
        s = running(c, create(c, rid).json()["id"])
        assert s["status"] == wire.SessionStatus.ERROR and built == []
        assert s["error"]["code"] == wire.SessionErrorCode.SESSION_FAILED
        assert "could not start a thread to build" in s["error"]["message"], s["error"]
        assert "can't start new thread" in s["error"]["message"]
        assert not c.app.state.registry._closers
        monkeypatch.undo()
        assert running(c, create(c, rid).json()["id"])["status"] == RUNNING  # the slot of the cap is free


@pytest.mark.slow  # LoRA: imports peft
def test_a_lora_sessions_create_answer_says_the_lora_settings_it_will_use(tmp_path, gate):
    """The create answered ``lora_config: null`` (read as full weights) or ``{"rank": 4, "alpha": null, ...}`` while
    CREATING; a client keeping the create's answer never saw what was used. Resolved at the create: the defaults, and
    a resume's settings from the session that saved its checkpoint."""
    with app_client(tmp_path) as c:
        lora = resource(c, lora_enabled=True)
        made = create(c, lora).json()
        assert made["status"] == CREATING
        defaults = {"rank": 8, "alpha": 16, "dropout": 0.0, "seed": "0", "train_unembed": True}
        assert made["lora_config"] == defaults
        assert c.get(f"/training-sessions/{made['id']}").json()["lora_config"] == defaults
        part = create(c, lora, lora_config={"rank": 4, "alpha": 8, "train_unembed": False}).json()
        assert part["lora_config"] == {**defaults, "rank": 4, "alpha": 8, "train_unembed": False}
        assert create(c, resource(c)).json()["lora_config"] is None  # full weights
        gate.set()
        assert running(c, made["id"])["lora_config"] == defaults
        sid = running(c, part["id"])["id"]
        assert c.get(f"/training-sessions/{sid}").json()["lora_config"] == part["lora_config"]
        ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
        resumed = create(c, lora, resume_from_checkpoint_id=ckpt["id"], lora_config={"seed": "3"}).json()
        expected = {**part["lora_config"], "seed": "3"}  # the checkpoint's rank, alpha, train_unembed
        assert resumed["status"] == CREATING and resumed["lora_config"] == expected
        assert running(c, resumed["id"])["lora_config"] == expected
