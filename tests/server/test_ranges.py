"""A number out of its range is a 400 naming the field *and its range*: pydantic's words named the one bound it broke
("seconds: Input should be greater than or equal to 60"), so a caller learnt the upper bound by breaking it too. The
range is the one ``/openapi.json`` declares (extend-expiry's ``seconds`` 60..86400 and ``inactive_timeout``
300..86400, as the Together SDK's ``ModelResourcesClient`` states them; a list's ``limit`` 1..100)."""

import pytest

from tests.support.server import app_client


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    with app_client(tmp_path_factory.mktemp("ranges")) as client:
        yield client


@pytest.fixture(scope="module")
def rid(c):
    return c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]


@pytest.mark.parametrize("seconds", [59, 0, -1, 86401, 10**12])
def test_extend_expiry_out_of_range_names_seconds_and_its_range(c, rid, seconds):
    r = c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": seconds})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "seconds"
    assert err["message"].startswith("seconds: ") and err["message"].endswith(f"(allowed: 60..86400; got {seconds})")


@pytest.mark.parametrize("seconds", [60, 86400])
def test_extend_expiry_takes_both_ends_of_its_range(c, rid, seconds):
    assert c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": seconds}).status_code == 200


@pytest.mark.parametrize(("timeout", "ok"), [(299, False), (300, True), (86400, True), (86401, False)])
def test_inactive_timeout_is_300_to_86400(c, timeout, ok):
    r = c.post("/model-resources", json={"base_model": "rlnb/tiny", "inactive_timeout": timeout})
    if ok:
        assert r.status_code == 200, r.text
        c.post(f"/model-resources/{r.json()['id']}/stop")
        return
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "inactive_timeout"
    assert err["message"].endswith(f"(allowed: 300..86400; got {timeout})"), err


@pytest.mark.parametrize("path", ["/model-resources", "/training-sessions", "/checkpoints"])
@pytest.mark.parametrize("limit", [0, 101, -5])
def test_a_list_limit_out_of_range_names_limit_and_its_range(c, path, limit):
    r = c.get(path, params={"limit": limit})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "limit"
    assert err["message"].endswith(f"(allowed: 1..100; got {limit})"), err


def test_a_value_that_is_no_number_says_what_pydantic_says(c):
    r = c.get("/training-sessions", params={"limit": "ten"})
    assert r.status_code == 400 and "allowed" not in r.json()["error"]["message"]


def test_a_huge_number_out_of_range_is_not_echoed(c, rid):
    r = c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": 10**200})
    err = r.json()["error"]
    assert r.status_code == 400 and err["message"].endswith("(allowed: 60..86400)") and len(err["message"]) < 200, err
