"""The API's paths are spelt once, in ``rlnb.wire.paths``: the server's routes are made from them, and so are the
client's calls (17 route decorators and 23 calls each spelt them out, kept together only by the tests that ran a
client against the server)."""

import httpx
import pytest

from rlnb import wire
from rlnb.errors import APIStatusError
from rlnb.remote.client import APIClient
from rlnb.server.routes import checkpoints, operations, payloads, resources, sessions
from rlnb.wire import paths
from tests.support.fake_api import BASE, KEY

TEMPLATES = {getattr(paths, name) for name in paths.__all__} - {paths.API_PREFIX}


def _each_kind(template: str) -> set[str]:
    return {template.replace("{kind}", kind) for kind in wire.ENVELOPES} if "{kind}" in template else {template}


def test_the_servers_keyed_routes_are_the_wire_paths_and_nothing_else():
    routers = (resources, sessions, operations, checkpoints, payloads)
    served = {route.path for module in routers for route in module.router.routes}  # the presigned files are apart
    assert all(path.startswith(f"{paths.API_PREFIX}/") for path in served)
    expected = {f"{paths.API_PREFIX}{path}" for template in TEMPLATES for path in _each_kind(template) | {template}}
    assert served == expected


def test_the_client_calls_the_wire_paths():
    """Each call of the client, with its ids filled in: the path it sends is a wire template's."""
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(500, json={"error": {"message": "recorded"}})

    ids = {"model_resources_id": "mr-1", "session_id": "s-1", "operation_id": "op-1", "payload_id": "p-1",
           "checkpoint_id": "c-1", "kind": wire.OperationKind.OPTIM_STEP}  # fmt: skip
    with APIClient(BASE, KEY, transport=httpx.MockTransport(answer), max_retries=0) as client:
        request = wire.CreateModelResourcesRequest(base_model="m")
        calls = [
            client.supported_models,
            lambda: client.create_model_resources(request),
            lambda: client.estimate_cost(request),
            client.list_model_resources,
            lambda: client.get_model_resources("mr-1"),
            lambda: client.extend_expiry("mr-1", 600),
            lambda: client.stop_model_resources("mr-1"),
            lambda: client.create_session(wire.StartTrainingSessionRequest(model_resources_id="mr-1")),
            client.list_sessions,
            lambda: client.get_session("s-1"),
            lambda: client.update_session("s-1", display_name="x"),
            lambda: client.stop_session("s-1"),
            lambda: client.submit_operation("s-1", wire.OperationKind.OPTIM_STEP, wire.OptimStepBody()),
            lambda: client.get_operation("s-1", wire.OperationKind.OPTIM_STEP, "op-1"),
            lambda: client.upload_payload("s-1", b"{}"),
            lambda: client.download_payload("s-1", "p-1"),
            client.list_checkpoints,
            lambda: client.get_checkpoint("c-1"),
            lambda: client.checkpoint_download_urls("c-1"),
        ]
        for call in calls:
            with pytest.raises(APIStatusError, match="recorded"):  # the 500 each gets: the path sent is looked at
                call()
    filled = {f"{paths.API_PREFIX}{template.format(**ids)}" for template in TEMPLATES}
    assert set(sent) == filled  # each call's path a template's, and each template called
