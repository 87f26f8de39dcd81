"""A finished operation's answer is its JSON bytes, made once: measured for ``max_kept_result_bytes``, embedded in
its journal line and sent by every GET and every retry of its POST. Those bytes are the ones a ``JSONResponse`` of
its envelope sends and the journal's line the one ``history.jsontext.line`` writes of it (each kind checked), and
the record keeps the bytes, not the envelope's objects (~3x their JSON in memory)."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.responses import JSONResponse

from rlnb import samples, wire
from rlnb.history.jsontext import line
from rlnb.server.records import OpRecord, SessionRecord
from rlnb.server.state import JOURNAL, Journal, Raw, journal_line
from tests.support.server import CE, app_client, new_session, sample_body, submit, wait

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CUSTOM = {"samples": [samples.cross_entropy([5, 6, 7, 8]).to_json_dict()], "gradients": [{"data": [0.5, -0.25, 1.0]}]}
BODIES: list[tuple[str, dict[str, Any] | None]] = [
    ("forward-backward", CE),
    ("custom-forward-backward", CUSTOM),
    ("optim-step", {}),
    ("weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}),
    ("sample", sample_body()),
    ("inference-checkpoint", None),
    ("training-checkpoint", None),
    ("stop", None),  # then a FAILED envelope: an operation of a stopped session
    ("optim-step", {}),
]


def as_sent(kind: str, body: bytes) -> bytes:
    """What a ``JSONResponse`` of the envelope object sends (the server's answer before it kept bytes)."""
    env = wire.ENVELOPES[wire.OperationKind(kind)].model_validate_json(body)
    return bytes(JSONResponse(env.model_dump(mode="json")).body)


def test_each_kinds_answer_and_journal_line_are_the_envelopes_bytes(tmp_path):
    state = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state) as c:
        _, sid = new_session(c)
        done: list[tuple[str, str, bytes]] = []
        for n, (kind, body) in enumerate(BODIES):
            if kind == "stop":
                assert c.post(f"/training-sessions/{sid}/stop").status_code == 200
                continue
            r = c.post(
                f"/training-sessions/{sid}/operations/{kind}", json=body or {}, headers={"Idempotency-Key": f"k{n}"}
            )
            assert r.status_code == 200, r.text
            env = wait(c, sid, kind, r.json()["id"])
            got = c.get(f"/training-sessions/{sid}/operations/{kind}/{env['id']}")
            assert got.headers["content-type"] == "application/json"
            assert got.content == as_sent(kind, got.content), kind
            retry = c.post(
                f"/training-sessions/{sid}/operations/{kind}", json=body or {}, headers={"Idempotency-Key": f"k{n}"}
            )
            assert retry.content == got.content, kind  # a retry answers the same bytes
            done.append((kind, env["id"], got.content))
        assert json.loads(done[-1][2])["status"] == wire.OperationStatus.FAILED
    lines = (state / "registry.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    for kind, op_id, answer in done:
        mine = [text for text in lines if text.startswith('{"op":') and json.loads(text)["op"]["env"]["id"] == op_id]
        entry = json.loads(mine[-1])["op"]
        env = wire.ENVELOPES[wire.OperationKind(kind)].model_validate_json(answer).model_dump(mode="json")
        assert mine[-1] == line(
            {"op": {**{k: entry[k] for k in ("session", "kind", "key", "fingerprint")}, "env": env}}
        )


def test_a_finished_operation_is_serialised_once_however_often_it_is_fetched(tmp_path, monkeypatch):
    """Its envelope was dumped to measure it, again for the journal, and again by every GET and retry."""
    dumps: list[str] = []
    for name in ("model_dump", "model_dump_json"):
        real = getattr(wire.Operation, name)

        def counted(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if self.status in wire.TERMINAL_STATUSES:
                dumps.append(self.id)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(wire.Operation, name, counted)
    with app_client(tmp_path / "ckpt", state_dir=tmp_path / "state") as c:
        _, sid = new_session(c)
        env = submit(c, sid, "sample", sample_body(), key="once")
        op = c.app.state.registry.session(sid).ops[env["id"]]  # type: ignore[attr-defined]
        answers = {wait(c, sid, "sample", env["id"])["id"]}
        for _ in range(5):
            got = c.get(f"/training-sessions/{sid}/operations/sample/{env['id']}")
            retry = c.post(
                f"/training-sessions/{sid}/operations/sample", json=sample_body(), headers={"Idempotency-Key": "once"}
            )
            answers.add(got.json()["id"])
            assert retry.content == got.content
        assert dumps.count(env["id"]) == 1, dumps
        assert op.answer == got.content and op.size == len(got.content)
        assert op.env.output is None  # the bytes are kept, not the result's objects besides them


def test_a_non_ascii_answer_is_written_to_the_journal_escaped_as_before():
    """The journal's lines are ASCII (``ensure_ascii``); the answer a GET sends is UTF-8."""
    env = wire.Operation.failed("op-é", wire.OperationErrorCode.INVALID_INPUT, "naïve ✓")
    s = SessionRecord("s", "r", "m", "me", NOW, NOW, wire.SessionStatus.RUNNING, None, None)
    op = s.ops[env.id] = OpRecord(wire.OperationKind.SAMPLE, env, key="k", fingerprint="f")
    before = line({"op": s.op_line(op)})
    s.ended(env.id)
    assert op.answer is not None and "naïve ✓".encode() in op.answer and op.answer == as_sent("sample", op.answer)
    assert journal_line("op", s.op_line(op)) == before
    assert before.isascii()


@pytest.mark.parametrize("answer", [b'{"id":"op-1","status":"X","output":{"a":[1.5,"NaN"]}}', '{"id":"é✓"}'.encode()])
def test_a_journal_line_embeds_an_answers_bytes_from_its_parts_and_reads_back(tmp_path, answer):
    """A ``Raw`` member is JSON text a caller made (a finished operation's answer): written as it is where ASCII, else
    as ``line`` writes its value (escaped), byte for byte the line of its parsed value either way, by the journal's
    rewrite and its append, and read back as that value. The op's line was made by cutting ``"}}\\n"`` off ``line``'s
    text and a ``str`` subclass written as is."""
    entry = {"session": "s", "kind": wire.OperationKind.SAMPLE, "key": "ké", "fingerprint": "f"}
    expected = line({"op": {**entry, "env": json.loads(answer)}})
    assert journal_line("op", {**entry, "env": Raw(answer)}) == expected and expected.isascii()
    journal = Journal(tmp_path)
    journal.rewrite([("op", {**entry, "env": Raw(answer)})])
    journal.append("op", {**entry, "env": Raw(answer)})
    journal.close()
    assert (tmp_path / JOURNAL).read_text(encoding="utf-8") == expected * 2
    again = Journal(tmp_path)
    try:
        assert again.load(5)["op"] == [{**entry, "env": json.loads(answer)}]
    finally:
        again.close()


@pytest.mark.parametrize("size", [1, 3])
def test_the_kept_bytes_are_the_answers_lengths(tmp_path, size):
    with app_client(tmp_path, max_kept_operations=size) as c:
        _, sid = new_session(c)
        sizes = []
        for n in range(3):
            env = wait(c, sid, "sample", submit(c, sid, "sample", sample_body(), key=f"s{n}")["id"])
            sizes.append(len(c.get(f"/training-sessions/{sid}/operations/sample/{env['id']}").content))
        s = c.app.state.registry.session(sid)  # type: ignore[attr-defined]
        assert s.kept_bytes == sum(sizes[-size:])
