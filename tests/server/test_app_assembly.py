"""``create_app`` adds the routers' routes, built once when their modules are imported, to each app as they are:
FastAPI's ``include_router`` builds every route of an included router again for each app, at its first request
(the dependencies analysed, a pydantic adapter per field: about 30 ms of CPU an app). The served API is the one
``include_router`` gives."""

import json

import fastapi.openapi.utils
import fastapi.routing
from fastapi import FastAPI
from fastapi.testclient import TestClient

from rlnb.server import create_app
from rlnb.server.app import ROUTERS
from rlnb.server.deps import get_registry
from rlnb.server.openapi import truthful_schema


def test_an_app_builds_no_route_state_of_its_own(monkeypatch, tmp_path):
    built: list[str] = []
    populate = fastapi.routing._populate_api_route_state

    def counting(route, path, *args, **kwargs):
        built.append(path)
        return populate(route, path, *args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "_populate_api_route_state", counting)
    app = create_app(checkpoint_dir=tmp_path)
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/v1/rl/training-sessions").status_code == 200
        assert client.post("/v1/rl/training-sessions/x/operations/nonsense").status_code == 404
    assert built == []


def test_the_document_is_the_one_include_router_gives(tmp_path):
    """A guard: the routes added directly serve the OpenAPI document of the same routers included FastAPI's way."""
    app = create_app(checkpoint_dir=tmp_path)
    included = FastAPI(title=app.title, version=app.version)
    for router in ROUTERS:
        included.include_router(router)
    document = truthful_schema(included.title, included.version, included.routes)
    with TestClient(app) as client:
        served = client.get("/openapi.json").content
    assert served == json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_second_app_takes_the_document_the_first_built(monkeypatch, tmp_path):
    """The OpenAPI document (about 0.2 s of CPU to build) is built once for every app ``create_app`` makes: a 405
    and a 400 that names a range read it. Each app has a copy of its own, which the other's changes leave alone."""
    first = create_app(checkpoint_dir=tmp_path / "1")
    with TestClient(first) as client:
        document = client.get("/openapi.json").json()
    paths: list[str] = []
    route_path = fastapi.openapi.utils.get_openapi_path

    def counting(*, route, **kwargs):
        paths.append(route.path)
        return route_path(route=route, **kwargs)

    monkeypatch.setattr(fastapi.openapi.utils, "get_openapi_path", counting)
    second = create_app(checkpoint_dir=tmp_path / "2")
    with TestClient(second) as client:
        assert client.delete("/v1/rl/training-sessions").status_code == 405
        refused = client.get("/v1/rl/training-sessions", params={"limit": 0})
        assert refused.status_code == 400 and "limit" in refused.text
        first.openapi()["info"]["title"] = "changed"
        assert client.get("/openapi.json").json() == document
    assert paths == []


def test_an_apps_dependency_overrides_reach_the_shared_routes_and_no_other_app(tmp_path):
    """FastAPI's way to swap a dependency (tests, an embedding app's own auth): the routes are shared by every app, so
    each request reads the overrides of the app serving it."""
    from rlnb.server.deps import current_user

    overridden = create_app(checkpoint_dir=tmp_path / "a", token="secret-token")
    overridden.dependency_overrides[current_user] = lambda: "someone"
    other = create_app(checkpoint_dir=tmp_path / "b", token="secret-token")
    with TestClient(overridden) as a, TestClient(other) as b:
        assert a.get("/v1/rl/training-sessions").status_code == 200
        assert b.get("/v1/rl/training-sessions").status_code == 401
        renamed = {"url": "/v1/rl/training-sessions/nope", "json": {"display_name": "x"}}
        assert a.patch(**renamed).status_code == 404  # a body read before the token is checked: the override too
        assert b.patch(**renamed).status_code == 401


def test_an_override_of_the_registry_is_honoured_before_a_body_is_read_too(tmp_path):
    """The early token check (before the body is read) asked the app's own registry even where the app overrides
    ``get_registry``: the override's key got 200 on a GET and 401 on a POST with a body."""
    one = create_app(device="cpu", checkpoint_dir=tmp_path / "1", token="token-one-0123456789")
    two = create_app(device="cpu", checkpoint_dir=tmp_path / "2", token="token-two-0123456789")
    one.dependency_overrides[get_registry] = lambda: two.state.registry
    with TestClient(one, base_url="http://testserver/v1/rl") as client, TestClient(two):
        key = {"Authorization": "Bearer token-two-0123456789"}
        assert client.get("/model-resources", headers=key).status_code == 200
        refused = client.post("/model-resources", headers=key, json={"base_model": "no-such"})
        assert refused.status_code == 400 and "base_model" in refused.text, refused.text  # past the key: the body
