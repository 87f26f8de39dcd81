"""Requests `rlnb serve` cannot read or route: each answered with the API's error body naming what was wrong."""

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from rlnb.server.errors import named
from tests.support.server import app_client, new_session

HUGE = "1" * 5000  # past Python's 4300-digit limit on reading an integer


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


def post_raw(c: TestClient, path: str, body: bytes | str) -> dict:
    r = c.post(path, content=body, headers={"Content-Type": "application/json", "Idempotency-Key": "k"})
    assert r.status_code == 400, r.text
    return r.json()["error"]


def test_a_5000_digit_integer_is_a_400_naming_its_field(c):
    """Python refuses to read an integer of more than 4300 digits: the body was answered "There was an error
    parsing the body" (FastAPI), naming nothing, and through the payload side channel with Python's advice to
    call ``sys.set_int_max_str_digits()``."""
    rid, sid = new_session(c)
    optim = f"/training-sessions/{sid}/operations/optim-step"
    err = post_raw(c, optim, f'{{"adam_params":{{"learning_rate":{HUGE}}}}}')
    assert err["param"] == "adam_params.learning_rate"
    assert "5000 digits" in err["message"] and "19 digits" in err["message"]
    err = post_raw(c, "/training-sessions", f'{{"model_resources_id":"{rid}","lora_config":{{"seed":{HUGE}}}}}')
    assert err["param"] == "lora_config.seed"
    err = post_raw(c, "/training-sessions", f'{{"model_resources_id":"{rid}","metadata":{{"x":[1,[2,{HUGE}]]}}}}')
    assert err["param"] == "metadata.x.1.1"  # list positions as pydantic names them
    err = post_raw(c, "/model-resources", HUGE)
    assert err["param"] is None and err["message"].startswith("the body: an integer of 5000 digits")


def test_a_5000_digit_integer_in_an_uploaded_payload_is_a_400_naming_its_field(c):
    _, sid = new_session(c)
    up = c.post(f"/training-sessions/{sid}/payloads/upload-url").json()
    body = f'{{"model_inputs":[{{"chunks":[{{"encoded_text":{{"tokens":[1,{HUGE}]}}}}]}}]}}'
    assert c.put(up["upload_url"], content=body, headers={"Content-Type": "application/json"}).status_code == 200
    stand_in = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1]}}]}], "payload_id": up["payload_id"]}
    inline = json.dumps(stand_in)
    err = post_raw(c, f"/training-sessions/{sid}/operations/sample", inline)  # the SDK's shrunk stand-in
    assert err["param"] == "payload.model_inputs.0.chunks.0.encoded_text.tokens.1", err
    assert "5000 digits" in err["message"] and "set_int_max_str_digits" not in err["message"]


def test_a_5000_digit_integer_under_900_lists_is_named_without_a_500(c):
    """The field is found by a walk of the decoded JSON in a loop, so any depth the decoder reads is walked; its path
    is cut as every echoed name is (``named``)."""
    err = post_raw(c, "/model-resources", '{"x":' + "[" * 900 + HUGE + "]" * 900 + "}")
    assert err["param"] == named("x" + ".0" * 900) and "5000 digits" in err["message"]
    assert err["param"].startswith("'x.0.0") and f"({1 + 2 * 900} characters)" in err["param"]


def test_a_body_nested_past_the_stack_says_so(c):
    """JSON nested past Python's stack was FastAPI's "There was an error parsing the body", naming nothing."""
    err = post_raw(c, "/model-resources", '{"x":' + "[" * 100_000 + "]" * 100_000 + "}")
    assert err["message"] == "the body nests JSON too deeply to read"


def test_a_body_that_is_not_utf8_says_so(c):
    err = post_raw(c, "/model-resources", b'{"base_model": "\xff"}')
    assert err["message"] == "the body is not valid JSON (it is not UTF-8 text)"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (r'{"base_model": "rlnb/tiny", "\ud800": 1}', r"\ud800"),
        (r'{"\ud800x": 1}', r"\ud800x"),
        (r'{"base_model": "rlnb/tiny", "compute_config": {"\udfff": 1}}', r"compute_config.\udfff"),
        (r'{"base_model": "rlnb/tiny", "metadata": [{"a\udc00b": 1}]}', r"metadata.0.a\udc00b"),
    ],
)
def test_a_key_holding_a_lone_surrogate_is_a_400_naming_it_escaped(c, raw, param):
    """Such a key was "the body must be a JSON object" (pydantic cannot read it as a string, and the error named the
    body as a whole), or pydantic's "unable to parse raw data as a unicode string" naming the object that held it."""
    err = post_raw(c, "/model-resources/estimate-cost", raw)
    assert err["param"] == param, err
    said = "this key holds a lone surrogate (half of a UTF-16 pair): it is not valid Unicode text"
    assert err["message"] == f"{param}: {said}"


def test_a_key_holding_a_lone_surrogate_in_an_upload_is_named_under_payload(c):
    _, sid = new_session(c)
    up = c.post(f"/training-sessions/{sid}/payloads/upload-url").json()
    assert c.put(up["upload_url"], content=r'{"model_inputs": [], "\udbff": 1}').status_code == 200
    inline = json.dumps({"model_inputs": [], "payload_id": up["payload_id"]})
    err = post_raw(c, f"/training-sessions/{sid}/operations/sample", inline)
    assert err["param"] == r"payload.\udbff", err


def test_a_pair_of_surrogates_in_a_key_is_a_character_and_named_as_such(c):
    err = post_raw(c, "/model-resources/estimate-cost", r'{"base_model": "rlnb/tiny", "\ud83d\ude00": 1}')
    assert err["param"] == "\U0001f600" or err["param"] == "\N{GRINNING FACE}" or err["param"] == "😀", err
    assert err["message"] == "😀: Extra inputs are not permitted"


@pytest.mark.parametrize(
    ("method", "path", "param"),
    [
        ("GET", "/training-sessions/a%2Fb", "session_id"),
        ("POST", "/training-sessions/a%2fb/stop", "session_id"),
        ("GET", "/model-resources/a%2Fb", "model_resources_id"),
        ("GET", "/checkpoints/a%2Fb/download?variant=CHECKPOINT_VARIANT_MERGED", "checkpoint_id"),
        ("GET", "/training-sessions/s/operations/optim-step/a%2Fb", "operation_id"),
    ],
)
def test_an_id_holding_an_encoded_slash_is_a_404_naming_it(c, method, path, param):
    """The ASGI server decodes ``%2F`` into a ``/`` before routing: no route matched and the answer was a bare
    "Not Found", naming neither the id nor the slash."""
    r = c.request(method, path)
    assert r.status_code == 404, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert err["message"] == f"{param} 'a/b' holds a '/' (sent as %2F): no {param} has one"


def test_a_route_miss_without_an_encoded_slash_is_a_route_miss(c):
    assert c.get("/no-such-thing").json()["error"]["message"].startswith("no route GET '/v1/rl/no-such-thing'")


def test_a_5000_digit_int64_string_is_named_not_echoed_whole(c):
    """An int64 may come as a decimal string; one of 5,000 digits was quoted whole in the 400's message."""
    err = post_raw(c, "/training-sessions", f'{{"model_resources_id":"mr-x","lora_config":{{"seed":"{HUGE}"}}}}')
    assert err["param"] == "lora_config.seed"
    assert "(5000 characters)" in err["message"] and len(err["message"]) < 200, err["message"]
