"""``max_kept_operations``: a session keeps its newest finished operations, not all of them for ever (an RL run of
10,000 steps made ~40,000 records, each ~3 KB or more). An older one is answered clearly: a GET is a 404 naming it and
the setting, a retry of its Idempotency-Key a 409 (never a second run); a restarted server applies the same bound."""

import json
import re
import shutil
import time

import pytest

from rlnb import wire
from rlnb.server.settings import ServerSettings, parse_limits
from tests.support.server import CE, DEADLINE, app_client, get_operation, new_session, sample_body, submit, wait

ROUND = [("forward-backward", CE), ("optim-step", {}), ("sample", None)]


def run(c, sid: str, n: int) -> list[tuple[str, dict, str]]:
    """``n`` operations, each waited for: (kind, final envelope, Idempotency-Key)."""
    done = []
    for i in range(n):
        kind, body = ROUND[i % len(ROUND)]
        key = f"key-{i}"
        env = submit(c, sid, kind, body if body is not None else sample_body(), key=key)
        done.append((kind, wait(c, sid, kind, env["id"]), key))
    return done


def assert_dropped(c, sid: str, kind: str, env: dict, keep: int) -> None:
    r = get_operation(c, sid, kind, env["id"])
    assert r.status_code == 404, r.text
    err = r.json()["error"]
    assert err["param"] == "operation_id" and err["type"] == "not_found"
    assert env["id"] in err["message"] and "max_kept_operations" in err["message"]
    assert f"newest {keep} finished operations" in err["message"]


def test_a_session_keeps_its_newest_finished_operations(tmp_path):
    with app_client(tmp_path, max_kept_operations=3) as c:
        _, sid = new_session(c)
        done = run(c, sid, 5)
        for kind, env, _ in done[:2]:
            assert_dropped(c, sid, kind, env, 3)
        for kind, env, _ in done[2:]:
            assert get_operation(c, sid, kind, env["id"]).json() == env  # the newest three, whole
        kind, env, _ = done[0]
        other = get_operation(c, sid, "optim-step", env["id"])  # a dropped id asked as another kind: plain not found
        assert other.status_code == 404 and "max_kept_operations" not in other.json()["error"]["message"]
        unknown = get_operation(c, sid, "forward-backward", "no-such-op")
        assert unknown.status_code == 404 and "max_kept_operations" not in unknown.json()["error"]["message"]


def test_the_key_of_a_dropped_operation_is_a_409_never_a_second_run(tmp_path):
    with app_client(tmp_path, max_kept_operations=2) as c:
        _, sid = new_session(c)
        done = run(c, sid, 4)
        step = next(env for kind, env, _ in done if kind == "optim-step")  # the second: dropped
        r = c.post(f"/training-sessions/{sid}/operations/optim-step", json={}, headers={"Idempotency-Key": "key-1"})
        assert r.status_code == 409, r.text
        assert r.headers["x-should-retry"] == "false"
        err = r.json()["error"]
        assert err["param"] == "Idempotency-Key" and step["id"] in err["message"]
        assert "max_kept_operations" in err["message"] and "a new request needs a new key" in err["message"]
        assert c.get(f"/training-sessions/{sid}").json()["step"] == "1"  # it did not run again
        kind, env, key = done[-1]  # a kept one still replays
        assert submit(c, sid, kind, ROUND[0][1], key=key)["id"] == env["id"]


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_pending_or_running_operation_is_never_dropped(tmp_path):
    with app_client(tmp_path, max_kept_operations=1, op_delay=0.4) as c:
        _, sid = new_session(c)
        queued = [submit(c, sid, "optim-step", {})["id"] for _ in range(3)]

        def status(op_id: str) -> str:
            r = get_operation(c, sid, "optim-step", op_id)
            assert r.status_code in (200, 404), r.text
            return r.json()["status"] if r.status_code == 200 else "dropped"

        done = {*wire.TERMINAL_STATUSES, "dropped"}
        held = c.get(f"/training-sessions/{sid}/operations/optim-step/{queued[-1]}", params={"wait": 20}).json()
        assert held["status"] != wire.OperationStatus.PENDING  # a long-poll on the last one, as the two before it ended
        deadline = time.monotonic() + DEADLINE
        while (seen := [status(op) for op in queued]) != ["dropped", "dropped", wire.OperationStatus.COMPLETED]:
            assert time.monotonic() < deadline, seen
            for i, state in enumerate(seen):  # only one that a newer one finished after is ever let go
                assert state != "dropped" or any(status(later) in done for later in queued[i + 1 :]), seen
        assert wait(c, sid, "optim-step", queued[-1])["output"]["step"] == "3"


def test_a_restarted_server_keeps_the_bound_and_the_tombstones(tmp_path):
    state, crashed = tmp_path / "state", tmp_path / "crashed"
    with app_client(tmp_path / "ckpt", state_dir=state, max_kept_operations=3) as c:
        _, sid = new_session(c)
        done = []
        for i, (kind, body) in enumerate(
            [("forward-backward", CE), ("optim-step", {}), ("optim-step", {}), ("sample", sample_body()),
             ("forward-backward", CE), ("forward-backward", CE)]
        ):  # fmt: skip
            done.append((kind, wait(c, sid, kind, submit(c, sid, kind, body, key=f"key-{i}")["id"])))
        shutil.copytree(state, crashed, ignore=shutil.ignore_patterns("state.lock"))  # as after a kill -9
    for folder in (state, crashed):
        with app_client(tmp_path / "ckpt", state_dir=folder, max_kept_operations=3) as c:
            for kind, env in done[:3]:
                assert_dropped(c, sid, kind, env, 3)
            for kind, env in done[3:]:
                assert get_operation(c, sid, kind, env["id"]).json() == env
            r = c.post(f"/training-sessions/{sid}/operations/optim-step", json={}, headers={"Idempotency-Key": "key-2"})
            assert r.status_code == 409 and "max_kept_operations" in r.json()["error"]["message"]
            assert c.get(f"/training-sessions/{sid}").json()["step"] == "2"  # after a crash: from dropped ones too
        journal = [json.loads(line) for line in (folder / "registry.jsonl").read_text().splitlines()]
        assert [next(iter(line)) for line in journal].count("op") == 3
        assert [next(iter(line)) for line in journal].count("dropped") == 3
    with app_client(tmp_path / "ckpt", state_dir=crashed, max_kept_operations=100) as c:  # a larger bound later
        assert_dropped(c, sid, *done[0], 100)  # what was let go stays a clear 404


@pytest.mark.parametrize("value", [0, -1, 2.5, "10", True, None])
def test_max_kept_operations_must_be_a_positive_integer(value):
    said = re.escape(f"max_kept_operations must be an integer in [1, 2147483647], got {value!r}")
    with pytest.raises(ValueError, match=said):
        ServerSettings(max_kept_operations=value)


def test_max_kept_operations_is_a_command_line_limit():
    assert parse_limits(["max_kept_operations=1e4"]) == {"max_kept_operations": 10_000}
    with pytest.raises(ValueError, match=re.escape("max_kept_operations must be an integer in [1, 2147483647]")):
        parse_limits(["max_kept_operations=0"])
    assert ServerSettings().max_kept_operations == 10_000
