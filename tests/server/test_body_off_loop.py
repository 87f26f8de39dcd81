"""A large JSON body is read and validated in a worker thread, not on the event loop (review41e F2): a 29.7 MB
forward-backward took 1.7 s to parse and 3.5 s to validate there, and every other client's polls waited meanwhile
(2.7-3.2 s). Its errors are the ones FastAPI gave, in the same order (a header's before the body's)."""

import asyncio
import json
import threading
import uuid

import pytest
from fastapi._compat import v2

from rlnb import samples, wire
from rlnb.server import deps
from tests.support.server import DEADLINE, app_client, new_session

OPS = "/training-sessions/{sid}/operations/forward-backward"
SAMPLE = samples.cross_entropy(list(range(200))).to_json_dict()
BIG = {"samples": [SAMPLE] * 40, "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
"""~75 KB, past ``deps.PARSED_ON_LOOP``: read in a worker thread."""


def post(c, sid: str, body, key: str | None = "k", **kw):
    headers = {} if key is None else {"Idempotency-Key": key}
    return c.post(OPS.format(sid=sid), json=body, headers=headers, **kw)


def test_the_big_body_is_past_the_threshold():
    assert len(json.dumps(BIG)) > deps.PARSED_ON_LOOP


def test_a_poll_is_answered_while_a_large_body_is_being_read(tmp_path, monkeypatch):
    entered, gate, parsed = threading.Event(), threading.Event(), threading.Event()
    real = deps.read_json

    def slow_read(body, *args):
        entered.set()
        gate.wait(10)  # on the event loop (as it was), the poll below waited these 10 s
        try:
            return real(body, *args)
        finally:
            parsed.set()

    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        monkeypatch.setattr(deps, "read_json", slow_read)
        answers: list = []
        sender = threading.Thread(target=lambda: answers.append(post(c, sid, BIG)))
        sender.start()
        try:
            assert entered.wait(DEADLINE)
            poll = c.get(f"/training-sessions/{sid}")
            assert poll.status_code == 200 and not parsed.is_set()  # answered while the body was still being read
        finally:
            gate.set()
            sender.join(DEADLINE)
        assert answers and answers[0].status_code == 200, answers
        assert answers[0].json()["status"] == wire.OperationStatus.PENDING


def _validations(monkeypatch) -> list[tuple[bool, str]]:
    """Each validation FastAPI's field makes: whether it ran on an event loop, and the type of what it validated."""
    seen: list[tuple[bool, str]] = []
    real = v2.ModelField.validate

    def validate(self, value, *args, **kwargs):
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        seen.append((on_loop, type(value).__name__))
        return real(self, value, *args, **kwargs)

    monkeypatch.setattr(v2.ModelField, "validate", validate)
    return seen


def test_a_large_body_is_validated_off_the_loop_and_fastapi_takes_the_model(tmp_path, monkeypatch):
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        seen = _validations(monkeypatch)
        r = post(c, sid, BIG)
        assert r.status_code == 200, r.text
        dicts = [on_loop for on_loop, kind in seen if kind == "dict"]
        assert dicts == [False], seen  # the JSON validated once, in a worker thread
        assert (True, "ForwardBackwardBody") in seen  # FastAPI's own pass takes the model as it is


def test_a_mid_sized_body_is_validated_off_the_loop(tmp_path, monkeypatch):
    """256 one-token samples (43 KB) took 2.9-7.5 ms to validate: under 64 KiB, they were validated on the event loop,
    every other client waiting. Only a body under ``deps.PARSED_ON_LOOP`` (4 KiB, 0.3 ms at most) is."""
    one = samples.cross_entropy([5, 6]).to_json_dict()
    mid = {"samples": [one] * 256, "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
    small = {**mid, "samples": [one]}
    assert len(json.dumps(small)) <= deps.PARSED_ON_LOOP < len(json.dumps(mid)) < 1 << 16
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        seen = _validations(monkeypatch)
        assert post(c, sid, mid).status_code == 200
        assert post(c, sid, small, key="k2").status_code == 200
    assert [on_loop for on_loop, kind in seen if kind == "dict"] == [False, True], seen


@pytest.mark.parametrize("size", ["small", "big"])
def test_errors_are_fastapis_whatever_the_bodys_size(tmp_path, size):
    body = {**BIG, "samples": [SAMPLE] * (40 if size == "big" else 1)}
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        bad = {**body, "forward_only": "yes"}
        err = post(c, sid, bad).json()["error"]
        assert err["param"] == "forward_only" and err["message"] == "forward_only: Input should be a valid boolean"
        err = post(c, sid, bad, key=None).json()["error"]  # the header's error first, as FastAPI orders them
        assert err["param"] == "Idempotency-Key", err
        unknown = post(c, sid, {**body, "forward_onyl": True}).json()["error"]
        assert unknown["param"] == "forward_onyl"
        loss = post(c, sid, {**body, "loss": {"type": "LOSS_TYPE_NOPE"}}).json()["error"]
        assert loss["param"] == "loss.type" and "LOSS_TYPE_NOPE" in loss["message"]
        headers = {"Idempotency-Key": str(uuid.uuid4()), "content-type": "application/json"}
        text = json.dumps(body)
        cut = c.post(OPS.format(sid=sid), content=text[:-2], headers=headers)
        assert cut.status_code == 400 and cut.json()["error"]["message"] == (
            "the body is not valid JSON (Expecting ',' delimiter)"
        ), cut.text
        bare = c.post(OPS.format(sid=sid), content="x" + text, headers={"Idempotency-Key": str(uuid.uuid4())})
        assert bare.status_code == 400 and bare.json()["error"]["message"] == (  # not JSON, no Content-Type: says so
            "the body must be JSON sent with Content-Type: application/json (none was sent)"
        ), bare.text
        twice = c.post(OPS.format(sid=sid), content='{"loss": {}, ' + text[1:], headers=headers)
        assert twice.json()["error"]["message"] == "loss is given 2 times in one object: give it once"
        assert post(c, sid, body, key=str(uuid.uuid4())).status_code == 200


@pytest.mark.parametrize("size", ["small", "big"])
def test_a_bad_token_is_a_401_before_the_body_is_parsed_or_validated(tmp_path, monkeypatch, size):
    """The token is checked before the body is read: a 401 costs no parse, no validation (review41j M1: a 29.7 MB
    body took 1.7 s to parse and 3.5 s to validate), and says nothing of the body to a caller without a key."""
    token = "rlnb-test-token-0123456789abcdef"
    body = {**BIG, "samples": [SAMPLE] * (40 if size == "big" else 1)}
    with app_client(tmp_path, token=token) as c:
        c.headers["Authorization"] = f"Bearer {token}"
        _, sid = new_session(c)
        del c.headers["Authorization"]
        seen = _validations(monkeypatch)
        parsed: list[int] = []
        real = deps.read_json
        monkeypatch.setattr(deps, "read_json", lambda raw, *a: parsed.append(len(raw)) or real(raw, *a))
        text = json.dumps(body)
        shown = {"content-type": "application/json", "Idempotency-Key": "k"}
        bodies = [json.dumps({**body, "forward_only": "yes"}), text, '{"loss": {}, ' + text[1:], text[:-2]]
        for raw in bodies:  # invalid, valid, a key given twice, cut JSON
            for wrong in ({"Authorization": "Bearer wrong"}, {}):  # a wrong key, none
                r = c.post(OPS.format(sid=sid), content=raw, headers={**shown, **wrong})
                assert r.status_code == 401, r.text
        assert parsed == [] and [kind for _, kind in seen if kind == "dict"] == []
        c.headers["Authorization"] = f"Bearer {token}"  # the right key: read and validated, once each
        assert post(c, sid, body).status_code == 200
        assert len(parsed) == 1 and [kind for _, kind in seen if kind == "dict"] == ["dict"]
