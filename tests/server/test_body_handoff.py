"""How a JSON body's checked parse reaches FastAPI: the route reads the body, checks it (``read_json``: a key given
twice is a 400) and hands FastAPI a request whose public ``json()`` returns that parse. It set Starlette's private
cache ``request._json`` instead: a Starlette that named its cache otherwise would have parsed the body again with
``json.loads``, and a key given twice would have been taken (the last value) without a word."""

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from tests.support.server import app_client

TWICE = b'{"base_model": "rlnb/small", "base_model": "rlnb/tiny"}'
JSON_TYPE = {"content-type": "application/json"}


@pytest.fixture
def c(tmp_path) -> Iterator[TestClient]:
    with app_client(tmp_path) as client:
        yield client


async def _json_cached_elsewhere(self: Request):
    """``Request.json`` of a Starlette whose cache is not ``_json``."""
    if not hasattr(self, "_json_cache"):
        self._json_cache = json.loads(await self.body())
    return self._json_cache


def test_a_key_given_twice_is_refused_whatever_starlette_names_its_json_cache(c, monkeypatch):
    monkeypatch.setattr(Request, "json", _json_cached_elsewhere)
    r = c.post("/model-resources", content=TWICE, headers=JSON_TYPE)
    assert r.status_code == 400 and "base_model is given 2 times" in r.json()["error"]["message"], r.text
    assert c.get("/model-resources").json()["data"] == []  # no resource of the last value


def test_fastapi_reads_the_checked_parse_not_the_body_again(c, monkeypatch):
    """One parse per body: Starlette's ``json.loads`` of it is never called (its parse would not be the checked one)."""

    async def parsed_again(self: Request):
        raise AssertionError("the body was parsed again")

    monkeypatch.setattr(Request, "json", parsed_again)
    r = c.post("/model-resources", json={"base_model": "rlnb/tiny"})
    assert r.status_code == 200 and r.json()["base_model"] == "rlnb/tiny", r.text


def test_a_body_that_is_not_json_is_still_fastapis_to_explain(c):
    r = c.post("/model-resources", content=b'{"base_model": ', headers=JSON_TYPE)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("the body is not valid JSON"), r.text
