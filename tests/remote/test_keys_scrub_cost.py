"""Scrubbing a body costs work proportional to its strings, not to its strings times the credentials kept: with the
store full (a load balancer's cookie that changes with every answer), every string of a body was checked against each
form of each of 257 keys, 257 times the work of one key."""

import json

import httpx

from rlnb.remote import bodies
from rlnb.secrets import masks, redaction
from tests.support.fake_api import BASE


def test_decoding_a_body_reads_each_keys_forms_once_not_once_per_string(monkeypatch):
    for i in range(redaction.SEEN_LIMIT):
        redaction.remember(f"lb{i:04d}-0123456789abcdef0123")
    calls = []
    real = masks.forms
    monkeypatch.setattr(masks, "forms", lambda key: calls.append(key) or real(key))
    records = [{"id": f"sess-{i}", "name": f"run\n{i} lb0007-0123456789abcdef0123"} for i in range(500)]
    answer = httpx.Response(200, content=json.dumps({"data": records}).encode(), request=httpx.Request("GET", BASE))
    data = bodies.Scrubber(None).decode(answer, "sessions")
    assert data["data"][499] == {"id": "sess-499", "name": "run\n499 ***"}
    assert len(calls) <= len(redaction.known()) + 1, len(calls)  # one build of the pattern, not one per string
    calls.clear()
    bodies.Scrubber(None).decode(answer, "sessions")
    assert not calls  # the store did not change: the same pattern
    redaction.remember("a-new-cookie-0123456789")
    assert redaction.redact("set a-new-cookie-0123456789") == "set ***"  # a change is seen at once
