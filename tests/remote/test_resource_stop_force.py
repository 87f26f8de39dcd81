"""``APIClient.stop_model_resources`` stops without force unless asked, as the reference's endpoint and the SDK's
``.stop(force=False)`` do (it forced, stopping a resource's other sessions with it); rlnb's own clean-up, which stops
the resource it created after its session, asks for force."""

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, error

RESOURCE_STOP = r"/model-resources/[^/]+/stop$"


def _forces(fake: FakeAPI) -> list[str | None]:
    return [r.url.params.get("force") for r in fake.calls("POST", RESOURCE_STOP)]


def test_a_stop_is_not_forced_unless_asked():
    fake = FakeAPI()
    rid = fake.add_resource({"adam": {}})
    with APIClient(BASE, api_key=KEY, transport=httpx.MockTransport(fake)) as c:
        c.stop_model_resources(rid)
        fake.resources[rid]["status"] = "MODEL_RESOURCES_STATUS_READY"
        c.stop_model_resources(rid, force=True)
    assert _forces(fake) == ["false", "true"]


def test_close_stops_the_resource_it_created_with_force():
    fake = FakeAPI()
    with rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), ready_timeout=5, record=False,
                      **FAST_POLL):  # fmt: skip
        pass
    assert _forces(fake) == ["true"]


def test_a_failed_start_stops_the_resource_it_created_with_force():
    fake = FakeAPI()

    def handler(request):
        if request.method == "POST" and request.url.path.endswith("/training-sessions"):
            return error(400, "no session for you", "model_resources_id")
        return fake(request)

    with pytest.raises(rlnb.errors.BadRequestError, match="no session for you"):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), ready_timeout=5, record=False,
                     **FAST_POLL)  # fmt: skip
    assert _forces(fake) == ["true"]
