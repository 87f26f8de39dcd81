"""Ctrl-C while ``connect`` waits for the answer to a create: the server may have acted already (the POST reached
it), but rlnb never learnt the new object's id, so the clean-up that follows a failed ``connect`` stopped nothing:
the model resource (reserved GPUs) ran on until its ``inactive_timeout``, or the session held the resource's session
slot, named nowhere. Against the real app, in process; the interrupt is raised where the answer is awaited, after
the app acted."""

import pytest

import rlnb
from rlnb import wire
from tests.support.fake_api import error
from tests.support.lost_answers import RESOURCES, SESSIONS, LoseAnswer, listed
from tests.support.server import app_client

RESOURCE_STOPPING = {wire.ModelResourcesStatus.STOPPING, wire.ModelResourcesStatus.STOPPED}
SESSION_STOPPING = {wire.SessionStatus.STOPPING, wire.SessionStatus.STOPPED}


def test_ctrl_c_while_a_resource_create_is_answered_stops_the_resource_the_server_made(tmp_path):
    with app_client(tmp_path) as c:
        interrupted = LoseAnswer(c, RESOURCES, KeyboardInterrupt())  # type: ignore[arg-type]  # a BaseException
        with interrupted.client() as http, pytest.raises(KeyboardInterrupt):
            rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False)
        resources = listed(c, RESOURCES)
        assert interrupted.posts == 1 and len(resources) == 1
        assert resources[0]["status"] in RESOURCE_STOPPING  # it was READY: an orphan holding reserved GPUs


@pytest.mark.slow  # a session builds its model: over a second
def test_ctrl_c_while_a_session_create_is_answered_stops_the_session_on_a_resource_of_ones_own(tmp_path):
    with app_client(tmp_path) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        interrupted = LoseAnswer(c, SESSIONS, KeyboardInterrupt())  # type: ignore[arg-type]
        with interrupted.client() as http, pytest.raises(KeyboardInterrupt):
            rlnb.connect("http://testserver", model_resources_id=rid, http_client=http, record=False)
        sessions = listed(c, SESSIONS)
        assert interrupted.posts == 1 and len(sessions) == 1
        assert sessions[0]["status"] in SESSION_STOPPING  # it ran on, holding the resource's session slot
        assert [r["status"] for r in listed(c, RESOURCES)] == [wire.ModelResourcesStatus.READY]  # the user's, kept


def test_ctrl_c_while_a_create_is_answered_by_a_server_that_made_nothing_says_where_to_look(tmp_path):
    with app_client(tmp_path) as c:

        class Unmade(LoseAnswer):  # interrupted before the app acts
            def __call__(self, request):
                if request.method == "POST" and request.url.path == RESOURCES:
                    self.posts += 1
                    raise KeyboardInterrupt
                return super().__call__(request)

        interrupted = Unmade(c, RESOURCES, KeyboardInterrupt())  # type: ignore[arg-type]
        with interrupted.client() as http, pytest.raises(KeyboardInterrupt) as info:
            rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "may have created a model resource all the same" in notes
    assert ".list_model_resources(created_by='me')" in notes


def test_ctrl_c_while_a_failed_connect_stops_what_it_created_names_what_may_still_run(tmp_path):
    """A ``connect`` that failed stops the resource it created; Ctrl-C then (the stop is slow) left it running, and
    its id was nowhere: the ``KeyboardInterrupt`` now carries a note naming it and the call that stops it."""
    with app_client(tmp_path) as c:

        class RefusedThenInterrupted(LoseAnswer):  # the session is refused; the stop of the resource interrupted
            def __call__(self, request):
                if request.method == "POST" and request.url.path == SESSIONS:
                    return error(400, "no session for you")
                if request.method == "POST" and request.url.path.endswith("/stop"):
                    raise KeyboardInterrupt
                return super().__call__(request)

        handler = RefusedThenInterrupted(c, "/nothing-lost", error(500, "unused"))
        with handler.client() as http, pytest.raises(KeyboardInterrupt) as info:
            rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False)
        [resource] = listed(c, RESOURCES)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert resource["status"] == wire.ModelResourcesStatus.READY  # still running: the stop never reached the app
    assert f"APIClient('http://testserver').stop_model_resources('{resource['id']}', force=True)" in notes
    assert isinstance(info.value.__context__, rlnb.BadRequestError)  # the failure that set the clean-up off
