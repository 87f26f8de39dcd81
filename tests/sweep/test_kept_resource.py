"""A remote trial waiting for a session slot (429 at ``max_live_sessions``) shares one model resource among its tries,
and stops it once, at its end: each try created one and stopped it again. Against the real app, in process."""

import threading

import httpx
import pandas as pd
import pytest
from fastapi.testclient import TestClient

import rlnb
from rlnb import wire
from rlnb.errors import RateLimitError
from rlnb.remote.backend import RemoteBackend
from rlnb.sweep import sweep
from tests.support.server import app_client, new_session
from tests.support.stopped_sweeps import ROOM, stopped_sweep

PARAMS = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
TARGET = "http://testserver"
CREATE, START = ("POST", "/v1/rl/model-resources"), ("POST", "/v1/rl/training-sessions")


class Relay:
    """An ``httpx.MockTransport`` handler that passes every request to the app behind ``c``, recording each
    (method, path, status); ``refused`` is set once the app has refused ``after`` sessions (429)."""

    def __init__(self, c: TestClient, after: int = 3):
        self.c, self.after = c, after
        self.sent: list[tuple[str, str, int]] = []
        self.refused = threading.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = self.c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
        self.sent.append((request.method, request.url.path, answer.status_code))
        if self.count(*START, status=429) >= self.after:
            self.refused.set()
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

    def count(self, method: str, path: str, status: int | None = None) -> int:
        return sum(m == method and p == path and status in (None, s) for m, p, s in self.sent)


def resources(c: TestClient) -> dict[str, str]:
    """Every model resource of the app, by id: its status."""
    return {r["id"]: r["status"] for r in c.get("/model-resources", params={"limit": 100}).json()["data"]}


def trials_resources(c: TestClient, held: str) -> dict[str, str]:
    return {rid: status for rid, status in resources(c).items() if rid != held}


def sweep_on(relay: Relay, **options) -> pd.DataFrame:
    return sweep(PARAMS, steps=1, target=TARGET, transport=httpx.MockTransport(relay), base_model="rlnb/tiny",
                 max_retries=0, progress=False, **options)  # fmt: skip


@pytest.mark.slow  # a real RL step on the app's model (seconds on a loaded machine)
def test_a_trial_waiting_for_a_slot_reuses_one_model_resource_and_its_session_stops_it(tmp_path):
    """Each 429 to the session stopped the resource the try had created, and the next try created another."""
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held, sid = new_session(c)  # the one session slot, taken
        relay = Relay(c)
        result: dict[str, pd.DataFrame] = {}
        run = threading.Thread(target=lambda: result.update(trials=sweep_on(relay, slot_timeout=ROOM,
                                                                             runs_dir=tmp_path / "runs")))  # fmt: skip
        run.start()
        assert relay.refused.wait(ROOM), relay.sent
        assert c.post(f"/training-sessions/{sid}/stop").status_code == 200  # the slot frees
        run.join(ROOM)
        assert not run.is_alive()
        trials = result["trials"]
        assert list(trials.status) == ["COMPLETED"], trials.reason.tolist()
        assert relay.count(*CREATE) == 1, relay.sent
        assert list(trials_resources(c, held).values()) == [wire.ModelResourcesStatus.STOPPED.value]


@pytest.mark.slow  # the app, and a slot wait of a second
def test_a_trial_that_never_gets_a_slot_stops_its_one_model_resource_when_it_fails(tmp_path):
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held, _ = new_session(c)
        relay = Relay(c)
        trials = sweep_on(relay, slot_timeout=1.0, runs_dir=tmp_path / "runs")
        assert list(trials.status) == ["FAILED"], trials.reason.tolist()
        assert "no session slot within slot_timeout=1 s" in trials.reason[0]
        assert relay.count(*START, status=429) > 1 and relay.count(*CREATE) == 1, relay.sent
        assert list(trials_resources(c, held).values()) == [wire.ModelResourcesStatus.STOPPED.value]


@pytest.mark.slow  # the app
def test_a_trial_stopped_while_it_waits_for_a_slot_stops_its_one_model_resource(tmp_path):
    """A sweep's stop (and a Ctrl-C, which sets it) while the trial waits between tries."""
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held, _ = new_session(c)
        relay = Relay(c, after=2)
        trials = stopped_sweep(PARAMS, httpx.MockTransport(relay), relay.refused, TARGET, base_model="rlnb/tiny",
                               max_retries=0, slot_timeout=ROOM, runs_dir=tmp_path / "runs")  # fmt: skip
        assert list(trials.status) == ["STOPPED"], trials.reason.tolist()
        assert relay.count(*CREATE) == 1, relay.sent
        assert list(trials_resources(c, held).values()) == [wire.ModelResourcesStatus.STOPPED.value]


@pytest.mark.slow  # the app
def test_connect_keeping_its_resource_hands_it_back_on_a_429_and_a_plain_connect_stops_it(tmp_path):
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held, _ = new_session(c)
        relay = Relay(c)
        with httpx.Client(transport=httpx.MockTransport(relay)) as http:
            with pytest.raises(RateLimitError) as plain:
                RemoteBackend.connect(TARGET, base_model="rlnb/tiny", max_retries=0, http_client=http)
            assert plain.value.model_resources_id is None
            with pytest.raises(RateLimitError) as kept:
                RemoteBackend.connect(TARGET, base_model="rlnb/tiny", max_retries=0, http_client=http,
                                      keep_resource=True)  # fmt: skip
        rid = kept.value.model_resources_id
        assert rid is not None and f"model resource {rid} was kept running" in "".join(kept.value.__notes__)
        statuses = trials_resources(c, held)
        assert statuses.pop(rid) == wire.ModelResourcesStatus.READY.value
        assert list(statuses.values()) == [wire.ModelResourcesStatus.STOPPED.value]  # the plain connect's


@pytest.mark.slow  # the app, and a slot wait of a second
def test_a_sweep_given_keep_resource_leaves_its_trials_one_resource_running(tmp_path):
    """``keep_resource=True``: each try's resource was stopped all the same when its session was refused."""
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held, _ = new_session(c)
        relay = Relay(c)
        trials = sweep_on(relay, slot_timeout=1.0, keep_resource=True, runs_dir=tmp_path / "runs")
        assert list(trials.status) == ["FAILED"], trials.reason.tolist()
        assert relay.count(*CREATE) == 1, relay.sent
        ((rid, status),) = trials_resources(c, held).items()
        assert status == wire.ModelResourcesStatus.READY.value
        assert f"model resource {rid} was kept running" in trials.reason[0]  # named: it runs on, paid for


@pytest.mark.slow  # the app
def test_a_sweep_given_keep_resource_stopped_while_a_trial_waits_names_the_resource_left_running(tmp_path):
    """The trial's row said only "stopped while waiting for a session": the resource it kept ran on, named nowhere
    after the first try's 429 (the next tries' 429s were on a resource they had not created)."""
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held, _ = new_session(c)
        relay = Relay(c, after=2)
        options = {"max_retries": 0, "slot_timeout": ROOM, "keep_resource": True, "runs_dir": tmp_path / "runs"}
        trials = stopped_sweep(
            PARAMS, httpx.MockTransport(relay), relay.refused, TARGET, base_model="rlnb/tiny", **options
        )
        assert list(trials.status) == ["STOPPED"], trials.reason.tolist()
        ((rid, status),) = trials_resources(c, held).items()
        assert status == wire.ModelResourcesStatus.READY.value
        assert f"model resource {rid} was kept running" in trials.reason[0], trials.reason[0]


class Ending(Relay):
    """A ``Relay`` that, as it answers the ``after``-th 429, stops the trial's resource (as its ``inactive_timeout``
    would, while the trial waits) and frees the slot (``held``'s session stopped)."""

    def __init__(self, c: TestClient, held: tuple[str, str]):
        super().__init__(c, after=2)
        self.held = held

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = super().__call__(request)
        if answer.status_code == 429 and self.count(*START, status=429) == self.after:
            for rid in trials_resources(self.c, self.held[0]):
                assert self.c.post(f"/model-resources/{rid}/stop").status_code == 200
            assert self.c.post(f"/training-sessions/{self.held[1]}/stop").status_code == 200
        return answer


@pytest.mark.slow  # a real RL step on the app's model
def test_a_kept_resource_that_ended_while_the_trial_waited_gives_way_to_a_new_one(tmp_path):
    """The next try started its session on the ended resource: the row was FAILED "ModelResources ... is STOPPED"."""
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held = new_session(c)
        relay = Ending(c, held)
        trials = sweep_on(relay, slot_timeout=ROOM, runs_dir=tmp_path / "runs")
        assert list(trials.status) == ["COMPLETED"], trials.reason.tolist()
        assert relay.count(*CREATE) == 2, relay.sent
        statuses = list(trials_resources(c, held[0]).values())
        assert statuses == [wire.ModelResourcesStatus.STOPPED.value] * 2, statuses


class EndingAtStart(Relay):
    """A ``Relay`` that frees the slot as it answers the ``after``-th 429, then stops the trial's resource just before
    the next session request reaches the app: it ended after the try saw it READY (its ``inactive_timeout`` ran out
    in between), so the app answers that request 409."""

    def __init__(self, c: TestClient, held: tuple[str, str]):
        super().__init__(c, after=2)
        self.held, self.ended = held, False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if (request.method, request.url.path) == START and self.refused.is_set() and not self.ended:
            self.ended = True
            for rid in trials_resources(self.c, self.held[0]):
                assert self.c.post(f"/model-resources/{rid}/stop").status_code == 200
        answer = super().__call__(request)
        if answer.status_code == 429 and self.count(*START, status=429) == self.after:
            assert self.c.post(f"/training-sessions/{self.held[1]}/stop").status_code == 200
        return answer


@pytest.mark.slow  # a real RL step on the app's model
def test_a_kept_resource_that_ended_after_it_was_seen_ready_gives_way_to_a_new_one(tmp_path):
    """The session request on it was refused 409 (it is STOPPED), not ``ResourceEnded``: the row was FAILED."""
    with app_client(tmp_path / "ckpt", max_live_sessions=1) as c:
        held = new_session(c)
        relay = EndingAtStart(c, held)
        trials = sweep_on(relay, slot_timeout=ROOM, runs_dir=tmp_path / "runs")
        assert list(trials.status) == ["COMPLETED"], trials.reason.tolist()
        assert relay.ended and relay.count(*START, status=409) == 1 and relay.count(*CREATE) == 2, relay.sent
        statuses = list(trials_resources(c, held[0]).values())
        assert statuses == [wire.ModelResourcesStatus.STOPPED.value] * 2, statuses
