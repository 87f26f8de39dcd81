"""A server that died without closing a running session rebuilds its step and policy from the operations it kept and
the session line it saved: the higher of the two, so a resumed session's step (which no operation of its own carries)
and a step written into a compacted journal survive the crash."""

import shutil

from tests.support.server import app_client, new_session, running, submit, wait

SAMPLE = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "sampling_params": {"max_tokens": 1}}


def crashed_copy(state, tmp_path):
    """The state folder as a kill -9 leaves it: the journal as written, no lock held, nothing closed."""
    crashed = tmp_path / "crashed"
    shutil.copytree(state, crashed, ignore=shutil.ignore_patterns("state.lock"))
    return crashed


def progress(c, sid):
    s = c.get(f"/training-sessions/{sid}").json()
    return s["step"], s["policy_state"]


def test_a_session_resumed_from_a_checkpoint_keeps_its_step_after_a_crash(tmp_path):
    state = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state) as c:
        rid, sid = new_session(c)
        for _ in range(2):
            wait(c, sid, "optim-step", submit(c, sid, "optim-step", {})["id"])
        done = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])
        assert c.post(f"/training-sessions/{sid}/stop").status_code == 200
        body = {"model_resources_id": rid, "resume_from_checkpoint_id": done["output"]["checkpoint"]["id"]}
        resumed = running(c, c.post("/training-sessions", json=body).json()["id"])["id"]
        before = progress(c, resumed)
        assert before[0] == "2"
        crashed = crashed_copy(state, tmp_path)
    with app_client(tmp_path / "ckpt", state_dir=crashed) as c:
        assert progress(c, resumed) == before


def test_a_step_written_into_a_compacted_journal_survives_a_crash(tmp_path):
    state = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state, max_kept_operations=2) as c:
        _, sid = new_session(c)
        for _ in range(3):
            wait(c, sid, "optim-step", submit(c, sid, "optim-step", {})["id"])
        for _ in range(2):  # the optim-steps are let go: tombstones
            wait(c, sid, "sample", submit(c, sid, "sample", SAMPLE)["id"])
        registry = c.app.state.registry
        with registry.lock:
            registry.journal.rewrite(registry._entries())  # the compaction a long-running server does by itself
        assert progress(c, sid)[0] == "3"
        crashed = crashed_copy(state, tmp_path)
    with app_client(tmp_path / "ckpt", state_dir=crashed, max_kept_operations=2) as c:
        assert progress(c, sid)[0] == "3"
