"""``rlnb serve --state-dir`` against a hostile or damaged state directory (issue 19 §1.2, §1.8, §1.11,
§1.12): the signing key is written whole or not at all, and an empty, short or non-hex one stops the start
with a clear message; a journal line that names a checkpoint outside the checkpoint folder (or a symlink
out of it) is never served, and a checkpoint holding a symlink or a pipe is a 409 naming it, not a partial
set; a journal line nested too deeply is skipped; a restart that dropped a ``--model`` answers a 409 naming
it when a session is created on its resource."""

import errno
import hashlib
import hmac
import json
import logging
import os
from pathlib import Path

import pytest

from rlnb import cli, wire
from rlnb.server.state import StateDirError
from rlnb.testing import free_port
from tests.support.server import app_client, new_session, running, submit, wait


def serve_exit(capsys, state_dir: Path) -> tuple[int, str]:
    """``rlnb serve --state-dir`` as the command line runs it, when it stops before serving."""
    code = cli.main(["serve", "--device", "cpu", "--port", str(free_port()), "--state-dir", str(state_dir)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "holds a 0-byte signing key"),
        ("abcd\n", "holds a 2-byte signing key"),
        ("not hex at all", "is not a hex signing key"),
        ("\udcff\udcfe", "is not a hex signing key"),
    ],
)
def test_a_damaged_signing_key_stops_the_start_with_a_clear_message(tmp_path, capsys, content, says):
    """An empty key used to be accepted: a URL signed with ``hmac.new(b"", ...)`` downloaded any checkpoint."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "signing.key").write_text(content, errors="surrogateescape")
    with pytest.raises(StateDirError, match=says):
        app_client(tmp_path / "ckpt", state_dir=state_dir).__enter__()
    code, err = serve_exit(capsys, state_dir)
    assert code == 2 and says in err and "delete it to make a new key" in err and "Traceback" not in err


def test_the_signing_key_is_written_whole_or_not_at_all(tmp_path, monkeypatch, capsys):
    state_dir = tmp_path / "state"

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(StateDirError, match="cannot write its signing key .*No space left on device"):
        app_client(tmp_path / "ckpt", state_dir=state_dir).__enter__()
    assert not (state_dir / "signing.key").exists() and not (state_dir / "signing.key.tmp").exists()
    code, err = serve_exit(capsys, state_dir)
    assert code == 2 and "No space left on device" in err
    monkeypatch.undo()
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:  # the lock was let go; space again: it starts
        assert c.get("/supported-models").status_code == 200
    key = bytes.fromhex((state_dir / "signing.key").read_text())
    assert len(key) == 32 and oct((state_dir / "signing.key").stat().st_mode)[-3:] == "600"


def test_an_empty_key_cannot_forge_a_download(tmp_path):
    """The attack of issue 19: sign a URL with the empty key and download a checkpoint without a token."""
    state_dir = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state_dir, token="t-secret") as c:
        auth = {"Authorization": "Bearer t-secret"}
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}, headers=auth).json()["id"]
        sid = c.post("/training-sessions", json={"model_resources_id": rid}, headers=auth).json()["id"]
        c.headers.update(auth)
        running(c, sid)  # a create answers CREATING; an operation before RUNNING is a 409
        op = c.post(f"/training-sessions/{sid}/operations/inference-checkpoint", headers={"Idempotency-Key": "k"})
        op = op.json()
        cid = wait(c, sid, "inference-checkpoint", op["id"])["output"]["checkpoint"]["id"]
    (state_dir / "signing.key").write_text("")  # what a failed first write used to leave
    expires = "9999999999"
    sig = hmac.new(b"", "\n".join(["checkpoint", cid, "merged", "config.json", expires]).encode(), hashlib.sha256)
    with pytest.raises(StateDirError):
        app_client(tmp_path / "ckpt", state_dir=state_dir).__enter__()
    (state_dir / "signing.key").unlink()
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:  # a new key: the forged URL is refused
        forged = f"/checkpoints/{cid}/files/merged/config.json?expires={expires}&sig={sig.hexdigest()}"
        assert c.get(forged).status_code == 403


def hostile_journal(state_dir: Path, lines: list[dict]) -> None:
    """Append lines to a stopped server's journal."""
    with open(state_dir / "registry.jsonl", "a") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")


def checkpoint_line(cid: str, path: Path) -> dict:
    info = {"id": cid, "base_model": "rlnb/tiny", "created_at": "2026-01-01T00:00:00Z", "session_id": "sess-x",
            "step": "0", "type": "CHECKPOINT_TYPE_INFERENCE"}  # fmt: skip
    return {"checkpoint": {"info": info, "path": str(path)}}


def test_a_journal_cannot_point_a_checkpoint_outside_the_checkpoint_folder(tmp_path, caplog):
    state_dir, ckpts = tmp_path / "state", tmp_path / "state" / "checkpoints"
    with app_client(ckpts, state_dir=state_dir) as c:
        _, sid = new_session(c)
        real = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
    real_id = real["output"]["checkpoint"]["id"]
    outside = tmp_path / "elsewhere"
    (outside / "merged").mkdir(parents=True)
    (outside / "merged" / "secret.txt").write_text("not yours")
    (ckpts / "ckpt-link").symlink_to(outside)  # inside the folder by name, outside once resolved
    hostile_journal(state_dir, [
        checkpoint_line("ckpt-abs", outside), checkpoint_line("ckpt-dots", ckpts / ".." / ".." / "elsewhere"),
        checkpoint_line("ckpt-link", ckpts / "ckpt-link"), checkpoint_line("ckpt-etc", Path("/etc")),
    ])  # fmt: skip
    merged = {"variant": "CHECKPOINT_VARIANT_MERGED"}
    with caplog.at_level(logging.WARNING, "rlnb"), app_client(ckpts, state_dir=state_dir) as c:
        for cid in ("ckpt-abs", "ckpt-dots", "ckpt-link", "ckpt-etc"):
            r = c.get(f"/checkpoints/{cid}/download", params=merged)
            assert r.status_code == 404, r.text
        files = c.get(f"/checkpoints/{real_id}/download", params=merged).json()
        signed = next(f["url"] for f in files["data"] if f["filename"] == "config.json")
        assert c.get(signed.replace("config.json?", "passwd?")).status_code == 403  # signed for one file
        (ckpts / real_id / "merged" / "passwd").symlink_to("/etc/passwd")  # a file that leads out
        r = c.get(f"/checkpoints/{real_id}/download", params=merged)
        said = r.json()["error"]["message"]
        assert r.status_code == 409 and "file merged/passwd is a symlink" in said, r.text
        assert str(tmp_path) not in said and "/etc" not in said  # the server's paths are the operator's
        assert c.get(signed).status_code == 409  # not its files one by one either
    skipped = [r.getMessage() for r in caplog.records if "skipped checkpoint" in r.getMessage()]
    assert len(skipped) == 4 and all("is not in" in m for m in skipped)
    refused = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
    assert refused and all("passwd" in m for m in refused)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_download_holding_a_pipe_is_refused_naming_it_not_served_in_part(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, "rlnb"), app_client(tmp_path) as c:
        _, sid = new_session(c)
        done = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
        cid = done["output"]["checkpoint"]["id"]
        os.mkfifo(tmp_path / cid / "merged" / "model.fifo")
        r = c.get(f"/checkpoints/{cid}/download", params={"variant": "CHECKPOINT_VARIANT_MERGED"})
    said = r.json()["error"]["message"]
    assert r.status_code == 409 and "file merged/model.fifo is not a regular file" in said, r.text
    assert str(tmp_path) not in said
    assert any("model.fifo" in m.getMessage() for m in caplog.records if m.levelno == logging.WARNING)


def test_a_journal_line_nested_too_deeply_is_skipped_and_said(tmp_path, caplog):
    state_dir = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        rid, _ = new_session(c)
    with open(state_dir / "registry.jsonl", "a") as fh:
        fh.write('{"resource": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
        fh.write('{"session": {"id": "sess-deep", "metadata": ' + "[" * 50_000 + "]" * 50_000 + "}}\n")
    with caplog.at_level(logging.WARNING, "rlnb"), app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        assert c.get(f"/model-resources/{rid}").json()["status"] == wire.ModelResourcesStatus.READY  # the rest is read
    said = [r.getMessage() for r in caplog.records if "unreadable line" in r.getMessage()]
    assert len(said) == 2 and all("RecursionError" in m for m in said)


def test_a_restart_without_a_model_a_resource_uses_is_a_409_naming_it(tmp_path):
    state_dir = tmp_path / "state"
    models = {"rlnb/tiny": "tiny", "my/extra": "tiny"}
    with app_client(tmp_path / "ckpt", state_dir=state_dir, models=models) as c:
        rid = c.post("/model-resources", json={"base_model": "my/extra"}).json()["id"]
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:  # restarted without --model my/extra
        assert c.get(f"/model-resources/{rid}").json()["status"] == wire.ModelResourcesStatus.READY
        r = c.post("/training-sessions", json={"model_resources_id": rid})
        assert r.status_code == 409, r.text
        err = r.json()["error"]
        assert "'my/extra'" in err["message"] and "--model my/extra=" in err["message"]
        assert err["param"] == "model_resources_id"


def test_a_serving_journal_is_rewritten_compactly_and_a_restart_reads_the_same_state(tmp_path, monkeypatch):
    """Every operation added two journal lines, and the journal was compacted only at start: a server that ran
    for weeks read every line it ever wrote when it restarted. Past ``COMPACT_AFTER`` appended lines (and twice
    its compact size) it is rewritten while serving, and a restart finds every operation as it was."""
    from rlnb.server import state

    monkeypatch.setattr(state, "COMPACT_AFTER", 8)
    state_dir = tmp_path / "state"
    body = {"model_inputs": [wire.ModelInput.from_tokens([1, 2]).to_json_dict()], "sampling_params": {"max_tokens": 1}}
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        _, sid = new_session(c)
        ops = [wait(c, sid, "sample", submit(c, sid, "sample", body)["id"]) for _ in range(12)]
        lines = (state_dir / "registry.jsonl").read_text().splitlines()
    assert len(lines) < 2 * len(ops)  # two lines an operation, and more for the session, before
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        for op in ops:
            again = c.get(f"/training-sessions/{sid}/operations/sample/{op['id']}").json()
            assert (again["id"], again["status"]) == (op["id"], wire.OperationStatus.COMPLETED)


def test_a_state_dir_on_a_file_system_that_cannot_lock_serves_and_says_it_is_unlocked(tmp_path, monkeypatch):
    """``rlnb serve --state-dir`` on a file system without locks (Lustre without ``-o flock``: ENOSYS) would not start
    at all ("in use by another rlnb serve", with none running); it starts now, warning that nothing keeps a second
    server out. A lock another server holds is still refused, naming its pid."""
    import fcntl

    from rlnb._files import LockUnsupportedWarning
    from rlnb.server.state import Journal, StateDirLocked

    held = Journal(tmp_path / "held")
    with pytest.raises(StateDirLocked, match=rf"held is in use by another rlnb serve \(pid {os.getpid()}\)"):
        Journal(tmp_path / "held")
    held.close()

    def no_locks(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    unlocked = pytest.warns(LockUnsupportedWarning, match=r"state\.lock cannot be locked on this file system")
    with unlocked, app_client(tmp_path / "ckpt", state_dir=tmp_path / "lustre") as c:
        rid, sid = new_session(c)
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.RUNNING
