"""``HEAD``: ``wget --spider`` (a common container health check) and uptime monitors ask ``/health`` with HEAD, and
``rlnb serve`` answered 405, so a healthy server read as down. The API's routes take the methods the SDK sends,
never HEAD: there it is a 405 naming the methods the path takes."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.server import app_client


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("head")) as client:
        yield client


def test_health_answers_head_as_it_answers_get(c):
    head = c.head("http://testserver/health")
    assert head.status_code == 200, head.text
    assert head.headers["content-type"] == "application/json"
    assert c.get("http://testserver/health").json() == {"status": "ok"}


def test_a_head_of_an_api_route_is_a_405_naming_the_methods_it_takes(c):
    r = c.head("/model-resources")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
