"""``max_kept_result_bytes``: a session keeps its finished operations' results up to a size, not only a count (a
64 x 8 x 128-token sample, 1.8 MB of JSON, added ~15 MB to the server for good: an RL loop grew it by GBs). Past the
budget the oldest finished ones are let go, answered as ``max_kept_operations`` answers them, naming the budget."""

import re
import shutil

import pytest

from rlnb.server.settings import ServerSettings, parse_limits
from tests.support.server import app_client, get_operation, new_session, sample_body, submit, wait

BUDGET = 1500
"""Two samples of ``sample_body`` (~620 bytes of JSON each) fit, a third does not."""


def samples(c, sid: str, n: int) -> list[dict]:
    done = []
    for i in range(n):
        env = submit(c, sid, "sample", sample_body(), key=f"key-{i}")
        done.append(wait(c, sid, "sample", env["id"]))
    return done


def test_the_oldest_results_past_the_byte_budget_are_let_go_clearly(tmp_path):
    with app_client(tmp_path, max_kept_result_bytes=BUDGET) as c:
        _, sid = new_session(c)
        done = samples(c, sid, 5)
        for env in done[:3]:
            r = get_operation(c, sid, "sample", env["id"])
            assert r.status_code == 404, r.text
            err = r.json()["error"]
            assert err["param"] == "operation_id" and err["type"] == "not_found"
            assert env["id"] in err["message"] and "max_kept_result_bytes" in err["message"]
            assert "1,500 bytes" in err["message"]
        for env in done[3:]:  # the newest two, whole; fetched twice, the same bytes
            first, second = get_operation(c, sid, "sample", env["id"]), get_operation(c, sid, "sample", env["id"])
            assert first.json() == env and first.content == second.content
        headers = {"Idempotency-Key": "key-0"}
        retry = c.post(f"/training-sessions/{sid}/operations/sample", json=sample_body(), headers=headers)
        assert retry.status_code == 409, retry.text  # never a second run
        assert "max_kept_result_bytes" in retry.json()["error"]["message"]


def test_one_result_larger_than_the_budget_is_kept_until_the_next(tmp_path):
    with app_client(tmp_path, max_kept_result_bytes=1) as c:
        _, sid = new_session(c)
        old, new = samples(c, sid, 2)
        assert get_operation(c, sid, "sample", old["id"]).status_code == 404
        assert get_operation(c, sid, "sample", new["id"]).json() == new  # the newest is always there to be fetched


def test_a_restarted_server_keeps_the_byte_budget(tmp_path):
    state, crashed = tmp_path / "state", tmp_path / "crashed"
    with app_client(tmp_path / "ckpt", state_dir=state, max_kept_result_bytes=BUDGET) as c:
        _, sid = new_session(c)
        steps = [wait(c, sid, "optim-step", submit(c, sid, "optim-step", {}, key=f"step-{i}")["id"]) for i in range(2)]
        done = samples(c, sid, 3)
        shutil.copytree(state, crashed, ignore=shutil.ignore_patterns("state.lock"))  # as after a kill -9
    for folder in (state, crashed):
        with app_client(tmp_path / "ckpt", state_dir=folder, max_kept_result_bytes=BUDGET) as c:
            for kind, env in [("optim-step", steps[0]), ("optim-step", steps[1]), ("sample", done[0])]:
                r = get_operation(c, sid, kind, env["id"])
                assert r.status_code == 404 and "max_kept_result_bytes" in r.json()["error"]["message"], r.text
            for env in done[1:]:
                assert get_operation(c, sid, "sample", env["id"]).json() == env
            assert c.get(f"/training-sessions/{sid}").json()["step"] == "2"  # from the dropped steps too


@pytest.mark.parametrize("value", [0, -1, 2**63])
def test_max_kept_result_bytes_must_be_a_positive_integer(value):
    said = re.escape(f"max_kept_result_bytes must be an integer in [1, {2**63 - 1}], got {value!r}")
    with pytest.raises(ValueError, match=said):
        ServerSettings(max_kept_result_bytes=value)


def test_max_kept_result_bytes_is_a_command_line_limit():
    assert parse_limits(["max_kept_result_bytes=1e9"]) == {"max_kept_result_bytes": 10**9}
    assert ServerSettings().max_kept_result_bytes == 64 * 2**20
