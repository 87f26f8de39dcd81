"""A stop of what has already stopped. Together's API refuses to stop a model resource that already stopped or failed
with a 400 (the SDK 3.1.1's ``ModelResourcesClient.stop`` catches that ``BadRequestError`` and reads the resource),
and ``rlnb serve`` answered 200. A stopped session's stop stays a 200 with its view: nothing says the API refuses it,
and the SDK stops sessions that ended ERROR when their start fails."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from rlnb import wire
from tests.support.server import app_client, new_session

STOPPED = wire.ModelResourcesStatus.STOPPED


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("stop_again")) as client:
        yield client


def test_a_stop_of_a_stopped_resource_is_a_400_naming_it_and_changes_nothing(c):
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    first = c.post(f"/model-resources/{rid}/stop")
    assert first.status_code == 200 and first.json()["status"] == STOPPED, first.text
    for force in ("false", "true"):
        again = c.post(f"/model-resources/{rid}/stop", params={"force": force})
        assert again.status_code == 400, again.text
        err = again.json()["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == "model_resources_id", err
        assert err["message"] == f"model resource {rid} is already {STOPPED}: it needs no stop"
    assert c.get(f"/model-resources/{rid}").json() == first.json()


def test_a_stop_of_a_resource_stopped_with_its_sessions_is_a_400_too(c):
    rid, sid = new_session(c)
    assert c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).json()["status"] == STOPPED
    assert c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).status_code == 400
    assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPED


def test_a_stop_of_a_stopped_session_answers_200_with_its_view_unchanged(c):
    _, sid = new_session(c)
    first = c.post(f"/training-sessions/{sid}/stop")
    assert first.status_code == 200 and first.json()["status"] == wire.SessionStatus.STOPPED, first.text
    again = c.post(f"/training-sessions/{sid}/stop")
    assert again.status_code == 200 and again.json() == first.json(), again.text
