"""A method a path does not take (``GET .../operations/optim-step`` without an operation id, ``DELETE`` of a session)
was a bare 405 "Method Not Allowed" without the ``Allow`` header HTTP requires of it: it named neither the method nor
the ones the path takes. Now the 405 says both, and ``Allow`` lists them."""

import pytest

from tests.support.server import app_client


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    with app_client(tmp_path_factory.mktemp("methods")) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/training-sessions/s/operations/optim-step", "POST"),
        ("DELETE", "/training-sessions/s", "GET, PATCH"),
        ("PUT", "/model-resources", "GET, POST"),
        ("GET", "/model-resources/m/stop", "POST"),
    ],
)
def test_a_method_a_path_does_not_take_is_a_405_naming_it_and_the_allowed_ones(c, method, path, allowed):
    r = c.request(method, path)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allowed
    err = r.json()["error"]
    assert err["message"] == f"{method} is not a method of this path: it takes {allowed}", err
