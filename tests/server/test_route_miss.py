"""A path no route of ``rlnb serve`` matches was a bare 404 "Not Found": a base URL ending in ``/`` (a doubled ``//``
in every path), a path outside the API (``/v3/whoami``, ``/training-sessions`` without ``/v1/rl``) or a typo got
no word of what was wrong. The 404 names the method and the path (cut to ``SHOWN``), where the API's paths are, and
a doubled ``/``."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.server import app_client

ROOT = "http://testserver"


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("miss")) as client:
        yield client


def error_of(r) -> dict:
    assert r.status_code == 404, r.text
    return r.json()["error"]


def test_a_doubled_slash_is_named(c):
    err = error_of(c.post(f"{ROOT}/v1/rl//model-resources", json={"base_model": "rlnb/tiny"}))
    assert err["type"] == "not_found" and err["param"] is None
    assert err["message"].startswith("no route POST '/v1/rl//model-resources'")
    assert "holds '//'" in err["message"] and "a base URL ending in '/'" in err["message"]


@pytest.mark.parametrize("path", ["/v3/whoami", "/training-sessions", "/v1/training-sessions"])
def test_a_path_outside_the_api_says_where_it_is(c, path):
    err = error_of(c.get(f"{ROOT}{path}"))
    assert err["message"].startswith(f"no route GET {path!r}")
    assert "the API's paths start with /v1/rl/" in err["message"] and "/openapi.json" in err["message"]


def test_a_typo_under_the_api_points_at_its_paths(c):
    err = error_of(c.get("/training-sesions"))
    assert err["message"] == "no route GET '/v1/rl/training-sesions'; /openapi.json lists every path"


def test_a_long_path_is_cut_in_the_answer(c):
    r = c.get("/" + "x" * 8000)
    assert len(r.content) < 600 and "(8007 characters)" in error_of(r)["message"]
