"""A number out of its range is a 400 naming the field *and its range*: pydantic's words named the one bound it broke
("seconds: Input should be greater than or equal to 60"), so a caller learnt the upper bound by breaking it too. The
range is the one ``/openapi.json`` declares (extend-expiry's ``seconds`` 60..86400 and ``inactive_timeout``
300..86400, as the Together SDK's ``ModelResourcesClient`` states them; a list's ``limit`` 1..100)."""

import json

import pytest

from tests.support.server import app_client, new_session


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


def _lora(c, rid, lora_config: dict) -> dict:
    body = json.dumps({"model_resources_id": rid, "lora_config": lora_config})  # NaN as Python's json writes it
    r = c.post("/training-sessions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == f"lora_config.{next(iter(lora_config))}", err
    return err


def test_a_nan_out_of_range_says_nan_is_not_allowed_and_the_range(c, rid):
    err = _lora(c, rid, {"dropout": float("nan")})  # it said "Input should be less than 1"
    assert err["message"] == "lora_config.dropout: NaN is not allowed (allowed: [0, 1))", err


def test_a_half_open_range_is_named(c, rid):
    err = _lora(c, rid, {"dropout": 1.5})
    assert err["message"].endswith("(allowed: [0, 1); got 1.5)"), err


def test_an_int64_past_its_range_names_the_range(c, rid):
    err = _lora(c, rid, {"seed": 2**64})  # an int64 field that also takes a decimal string: its range was not found
    assert err["message"].endswith(f"(allowed: {-(2**63)}..{2**63 - 1}; got {2**64})"), err


def test_extend_expiry_of_a_stopped_resource_names_the_resource(c):
    stopped = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    assert c.post(f"/model-resources/{stopped}/stop").status_code == 200
    r = c.post(f"/model-resources/{stopped}/extend-expiry", json={"seconds": 600})
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["param"] == "model_resources_id" and stopped in err["message"] and "not ready" in err["message"], err


@pytest.fixture(scope="module")
def sid(c):
    return new_session(c)[1]


@pytest.mark.parametrize(
    ("where", "field", "value", "said"),
    [
        (
            "sampling_params",
            "temperature",
            -0.5,
            "Input should be greater than or equal to 0 (allowed: >= 0; got -0.5)",
        ),
        ("adam_params", "learning_rate", -0.5, "Input should be greater than 0 (allowed: > 0; got -0.5)"),
        ("adam_params", "eps", 0, "(allowed: > 0; got 0)"),
        ("muon_params", "weight_decay", -0.5, "(allowed: >= 0; got -0.5)"),
        ("adam_params", "grad_clip_norm", -0.5, "(allowed: >= 0; got -0.5)"),
        ("sampling_params", "temperature", float("inf"), "Input should be a finite number (allowed: >= 0; got inf)"),
        ("sampling_params", "temperature", float("nan"), "temperature: NaN is not allowed (allowed: >= 0)"),
        ("sampling_params", "top_p", float("nan"), "top_p: NaN is not allowed (allowed: (0, 1])"),
    ],
)
def test_a_number_with_one_bound_or_not_finite_names_the_range_too(c, sid, where, field, value, said):
    """``temperature: -1`` said only pydantic's "greater than or equal to 0" (review40c): a field with one bound had
    no ``(allowed: ...)``, nor had a NaN or infinity of a field with two, as every other range's 400 has."""
    kind, body = "optim-step", {where: {field: value}}
    if where == "sampling_params":
        kind, body["model_inputs"] = "sample", [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}]
    headers = {"Idempotency-Key": f"{field}={value}", "Content-Type": "application/json"}  # json writes inf and nan
    r = c.post(f"/training-sessions/{sid}/operations/{kind}", content=json.dumps(body), headers=headers)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == f"{where}.{field}" and err["message"].endswith(said), err
