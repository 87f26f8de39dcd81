"""A stop of a model resource that has already stopped: Together's API answers it 400 (the SDK 3.1.1's
``ModelResourcesClient.stop`` catches that and reads the resource), and so does ``rlnb serve``. ``APIClient`` raised
the 400, so a session's ``close()`` failed, and warned the resource "may still be running", when the resource had
expired, or when the answer of its stop was lost and the retried stop found it stopped. Now it reads the resource."""

import httpx
import pytest

from rlnb import wire
from rlnb.errors import BadRequestError
from rlnb.remote.client import APIClient
from rlnb.remote.retry import RetryPolicy
from tests.support.server import app_client

STOPPED = wire.ModelResourcesStatus.STOPPED


@pytest.fixture
def http(tmp_path):
    with app_client(tmp_path) as client:
        yield client


def test_a_stop_of_a_stopped_resource_answers_the_stopped_resource(http):
    c = APIClient("http://testserver", http_client=http)
    rid = c.create_model_resources(wire.CreateModelResourcesRequest(base_model="rlnb/tiny")).id
    first = c.stop_model_resources(rid)
    assert first.status == STOPPED
    assert c.stop_model_resources(rid) == first


def test_a_stop_retried_after_its_answer_was_lost_answers_the_stopped_resource(http):
    lost = []

    def lose_the_first_stop_answer(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/stop") and not lost:
            lost.append(response.status_code)  # the server has stopped it
            raise httpx.ReadError("connection reset", request=response.request)

    http.event_hooks["response"].append(lose_the_first_stop_answer)
    c = APIClient("http://testserver", http_client=http, retry=RetryPolicy(initial_delay=0.01))
    rid = c.create_model_resources(wire.CreateModelResourcesRequest(base_model="rlnb/tiny")).id
    assert c.stop_model_resources(rid).status == STOPPED
    assert lost == [200]


def test_a_400_for_a_resource_that_has_not_stopped_is_still_raised(http):
    c = APIClient("http://testserver", http_client=http)
    rid = c.create_model_resources(wire.CreateModelResourcesRequest(base_model="rlnb/tiny")).id

    def misspelt(request: httpx.Request) -> None:  # the server refuses the stop for another reason
        if request.url.path.endswith("/stop"):
            request.url = request.url.copy_add_param("forse", "true")

    http.event_hooks["request"].append(misspelt)
    with pytest.raises(BadRequestError, match="forse"):
        c.stop_model_resources(rid)
    assert c.get_model_resources(rid).status == wire.ModelResourcesStatus.READY
