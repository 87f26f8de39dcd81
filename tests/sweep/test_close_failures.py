"""A trial (or lr_find's copy) whose session's close fails (the server gone by then) keeps what it measured: the
close's error replaced the sweep's row (steps_done 0, no run_path, the close's error as the only reason) and escaped
lr_find with its steps. Against the real app, in process, its stops answered 503 (a server going away)."""

import httpx
import pytest
from fastapi.testclient import TestClient

import rlnb
from rlnb import wire
from rlnb.sweep import lr_find, sweep
from tests.support.server import app_client

PARAMS = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
TARGET = "http://testserver"


class StopsFail:
    """Passes every request to the app behind ``c``, but answers each stop 503 while ``failing``."""

    def __init__(self, c: TestClient) -> None:
        self.c, self.failing = c, True

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.failing and request.method == "POST" and request.url.path.endswith("/stop"):
            return httpx.Response(503, json={"error": {"message": "the server is going away"}})
        answer = self.c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)


def running(c: TestClient, what: str) -> list[str]:
    """The ids of the app's ``what`` ("model-resources", "training-sessions") that are not stopped."""
    listed = c.get(f"/{what}", params={"limit": 100}).json()["data"]
    return [x["id"] for x in listed if not x["status"].endswith("_STOPPED")]


@pytest.mark.slow  # real RL steps on the app's model
def test_a_trial_whose_close_fails_keeps_its_row_and_names_what_still_runs(tmp_path):
    with app_client(tmp_path / "ckpt") as c:
        trials = sweep(PARAMS, steps=2, target=TARGET, transport=httpx.MockTransport(StopsFail(c)),
                       base_model="rlnb/tiny", max_retries=0, progress=False, runs_dir=tmp_path / "runs")  # fmt: skip
        [sid], [rid] = running(c, "training-sessions"), running(c, "model-resources")
    row = trials.iloc[0]
    assert row.status == wire.TrialStatus.COMPLETED, row.reason
    assert row.steps_done == 2 and row.run_path is not None, row.to_dict()
    assert "its session's close failed: InternalServerError" in row.reason, row.reason
    assert f"session {sid} and model resource {rid} may still be running" in row.reason, row.reason
    assert f"stop_model_resources('{rid}', force=True)" in row.reason, row.reason


@pytest.mark.slow  # the app, in process
def test_lr_finds_copy_whose_close_fails_keeps_the_steps_measured_and_says_what_still_runs(tmp_path):
    with app_client(tmp_path / "ckpt") as c:
        relay = StopsFail(c)
        relay.failing = False
        remote = rlnb.connect(TARGET, optimizer="adam", base_model="rlnb/tiny", record=False,
                              transport=httpx.MockTransport(relay), max_retries=0)  # fmt: skip
        relay.failing = True
        found = lr_find(PARAMS, remote, steps=5, step_fn=lambda s, p, i: 1.0, runs_dir=tmp_path / "runs",
                        transport=httpx.MockTransport(relay), max_retries=0)  # fmt: skip
        copy = [s for s in running(c, "training-sessions") if s != remote.backend.session_id]
        relay.failing = False
        remote.close()
    assert len(found.values) == 5 and found.run_path is not None
    assert "; the copy's close failed: InternalServerError" in found.reason, found.reason
    assert f"session {copy[0]} and model resource" in found.reason and "may still be running" in found.reason
