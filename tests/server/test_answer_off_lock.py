"""A finished operation's answer, and its journal line with a state folder, are made on its session's worker before
the registry's lock is taken (review43a M): a 24 MB sample's answer took 0.8 s to encode under the lock, and
``/health`` and another session's GET waited 2.4 s for it."""

import json
import threading

from rlnb import wire
from rlnb.server import records
from tests.support.server import CE, DEADLINE, app_client, new_session, submit, wait

LOCK_WAIT = 30.0
"""Seconds the test waits for the registry's lock while an answer is encoded: it is free at once, else never."""


def test_other_requests_are_answered_while_an_answer_is_encoded(tmp_path, monkeypatch):
    entered, gate = threading.Event(), threading.Event()
    encoding: list[str] = []
    real = records.envelope_bytes

    def slow(env):
        if env.status == wire.OperationStatus.COMPLETED and not encoding:
            encoding.append(env.id)
            entered.set()
            gate.wait(DEADLINE)  # under the lock, every request below would wait for it
        return real(env)

    state = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state) as c:
        registry = c.app.state.registry  # type: ignore[attr-defined]
        _, other = new_session(c)
        kept = wait(c, other, "optim-step", submit(c, other, "optim-step", {})["id"])
        _, sid = new_session(c)
        monkeypatch.setattr(records, "envelope_bytes", slow)
        op = submit(c, sid, "forward-backward", CE)
        try:
            assert entered.wait(DEADLINE)
            assert registry.lock.acquire(timeout=LOCK_WAIT), "the registry's lock is held while the answer is encoded"
            registry.lock.release()
            assert c.get("http://testserver/health").status_code == 200
            got = c.get(f"/training-sessions/{other}/operations/optim-step/{kept['id']}")
            assert got.status_code == 200 and got.json() == kept
            mine = c.get(f"/training-sessions/{sid}/operations/forward-backward/{op['id']}")
            assert mine.status_code == 200 and mine.json()["status"] != wire.OperationStatus.COMPLETED
        finally:
            gate.set()
        done = wait(c, sid, "forward-backward", op["id"])
        assert encoding == [op["id"]] and done["status"] == wire.OperationStatus.COMPLETED
        answer = c.get(f"/training-sessions/{sid}/operations/forward-backward/{op['id']}").content
    lines = [json.loads(text)["op"] for text in (state / "registry.jsonl").read_text().splitlines() if '"op":' in text]
    journaled = [entry["env"] for entry in lines if entry["env"]["id"] == op["id"]]
    assert journaled[-1] == json.loads(answer)  # the line made beside the answer, written under the lock
