"""``registry.jsonl`` as standard JSON (a non-finite number as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, restored
as the float), a journal an older rlnb wrote with bare ``NaN`` still restoring, and its rewrite never made through a
link planted at its temporary name."""

import json
import logging
import math
import os
from pathlib import Path

import pytest

from rlnb import wire
from rlnb.server.restore import restore
from rlnb.server.state import KINDS, Journal, StateDirError
from tests.support.pipes import refusal_in_time
from tests.support.server import app_client, new_session, running

INF, NAN = math.inf, math.nan


def op_lines(sid: str) -> list[tuple[str, dict]]:
    """Two finished optim-steps of session ``sid`` whose metrics (rlnb's pre-clip gradient norms, which overflow)
    are not finite."""
    return [
        ("op", {"session": sid, "kind": wire.OperationKind.OPTIM_STEP, "key": None, "fingerprint": None,
                "env": {"id": f"op-{n}", "status": wire.OperationStatus.COMPLETED,
                        "output": {"step": n, "metrics": {"grad_norm": INF, "kl": NAN, "low": -INF}}}})
        for n in (1, 2)
    ]  # fmt: skip


def served_session(tmp_path: Path) -> tuple[Path, str]:
    state_dir = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        _, sid = new_session(c)
    return state_dir, sid


def restored_ops(tmp_path: Path, state_dir: Path, sid: str) -> dict:
    journal = Journal(state_dir)
    try:
        ops = restore(journal.load(100), tmp_path / "ckpt").sessions[sid].ops
    finally:
        journal.close()
    return {op_id: op.env.output for op_id, op in ops.items()}


def check_floats(outputs: dict) -> None:
    for n in (1, 2):
        metrics = outputs[f"op-{n}"].metrics
        assert (metrics["grad_norm"], metrics["low"]) == (INF, -INF) and math.isnan(metrics["kl"])


def test_a_journal_line_with_nan_and_infinity_is_standard_json_and_restores_as_the_floats(tmp_path):
    state_dir, sid = served_session(tmp_path)
    journal = Journal(state_dir)
    saved = journal.load(100)
    journal.rewrite([(kind, data) for kind in KINDS for data in saved[kind]] + op_lines(sid)[:1])
    journal.append(*op_lines(sid)[1])
    journal.close()

    def refuse(constant: str) -> None:
        raise ValueError(f"not standard JSON: {constant}")

    lines = [json.loads(t, parse_constant=refuse) for t in (state_dir / "registry.jsonl").read_text().splitlines()]
    ops = {line["op"]["env"]["id"]: line["op"]["env"]["output"] for line in lines if "op" in line}
    spelled = {"grad_norm": "Infinity", "kl": "NaN", "low": "-Infinity"}
    assert ops["op-1"]["metrics"] == ops["op-2"]["metrics"] == spelled
    check_floats(restored_ops(tmp_path, state_dir, sid))


def test_a_journal_an_older_rlnb_wrote_with_bare_nan_still_restores(tmp_path):
    state_dir, sid = served_session(tmp_path)
    with open(state_dir / "registry.jsonl", "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps({kind: data}) + "\n" for kind, data in op_lines(sid))  # bare NaN, as it was
    assert '"low": -Infinity' in (state_dir / "registry.jsonl").read_text()
    check_floats(restored_ops(tmp_path, state_dir, sid))


def test_a_session_named_nan_stays_text_when_restored(tmp_path):
    state_dir = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        body = {"model_resources_id": rid, "display_name": "NaN"}  # text spelled as a number: read back as text
        sid = running(c, c.post("/training-sessions", json=body).json()["id"])["id"]
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        assert c.get(f"/training-sessions/{sid}").json()["display_name"] == "NaN"


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_the_journal_rewrite_never_writes_through_a_link_at_its_temporary_name(tmp_path, caplog, how):
    """The rewrite opened ``registry.jsonl.tmp`` with a plain "w": a link planted there had the journal written over
    its target (a user's notes), and a hard link's other name kept it."""
    state_dir, sid = served_session(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    tmp = state_dir / "registry.jsonl.tmp"
    tmp.symlink_to(notes) if how == "symlink" else os.link(notes, tmp)
    with caplog.at_level(logging.ERROR, "rlnb"), app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        assert c.get(f"/training-sessions/{sid}").status_code == 200
    assert notes.read_text() == "mine\n"
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    if how == "symlink":  # refused as a run folder's temporary file is, and said: the server goes on in memory
        assert any("registry.jsonl.tmp is a symbolic link" in m and "goes on in memory" in m for m in said)
    else:  # a new file made in its place: the journal is written, and read at the next start
        assert said == [] and not tmp.exists()
        with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
            assert c.get(f"/training-sessions/{sid}").status_code == 200


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_the_signing_key_is_never_written_through_a_link_at_its_temporary_name(tmp_path, how):
    """It was opened with ``O_CREAT | O_TRUNC``, following links: the new key went into the link's target (a user's
    notes, or a file others may read)."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    tmp = state_dir / "signing.key.tmp"
    tmp.symlink_to(notes) if how == "symlink" else os.link(notes, tmp)
    if how == "symlink":
        with pytest.raises(StateDirError, match=r"signing\.key\.tmp is a symbolic link"):
            app_client(tmp_path / "ckpt", state_dir=state_dir).__enter__()
        assert tmp.is_symlink()  # the user's link, left where it is
    else:
        with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
            assert c.get("/model-resources").status_code == 200
        assert (state_dir / "signing.key").stat().st_mode & 0o777 == 0o600
    assert notes.read_text() == "mine\n"


def test_a_journal_that_is_a_symbolic_link_stops_the_start_naming_it(tmp_path):
    """``registry.jsonl`` as a link was read through at start (another server's journal, or any file, taken as this
    one's) and then replaced by the compacting rename: the server went on from another file's state, and the link was
    gone. Refused as a run folder's links are, the link left where it is and the state folder unlocked."""
    state_dir, sid = served_session(tmp_path)
    journal, elsewhere = state_dir / "registry.jsonl", tmp_path / "elsewhere.jsonl"
    journal.rename(elsewhere)
    journal.symlink_to(elsewhere)
    text = elsewhere.read_text()
    with pytest.raises(StateDirError, match=r"registry\.jsonl is a symbolic link \(to '.*elsewhere\.jsonl'\)"):
        app_client(tmp_path / "ckpt", state_dir=state_dir).__enter__()
    assert journal.is_symlink() and elsewhere.read_text() == text
    journal.unlink()
    elsewhere.rename(journal)  # the state folder was left unlocked: the next start owns it
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        assert c.get(f"/training-sessions/{sid}").status_code == 200


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("name", ["registry.jsonl", "signing.key"])
def test_a_state_file_that_is_a_named_pipe_stops_the_start_naming_it(tmp_path, name):
    """Read at start, a named pipe waited for ever for a writer: ``rlnb serve`` never listened, saying nothing."""
    state_dir, _ = served_session(tmp_path)
    (state_dir / name).unlink()
    os.mkfifo(state_dir / name)

    def start() -> None:
        with app_client(tmp_path / "ckpt", state_dir=state_dir):
            pass

    said = refusal_in_time(start, state_dir / name, StateDirError)
    assert f"{name} is a named pipe, not a file" in str(said)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_state_dir_that_is_a_file_or_a_pipe_is_refused_saying_so(tmp_path):
    """``create_app(state_dir=...)`` on a file or a named pipe said "[Errno 17] File exists", not what is there."""
    file, pipe = tmp_path / "notes.txt", tmp_path / "pipe"
    file.write_text("mine\n")
    os.mkfifo(pipe)
    for there, kind in ((file, "a file"), (pipe, "a named pipe")):
        with pytest.raises(StateDirError, match=f"^state_dir '{there}' is {kind}: the server's state goes into a"):
            Journal(there)
    with pytest.raises(StateDirError, match=f"^state_dir '{file}/sub' is under '{file}', a file: "):
        Journal(file / "sub")
    assert file.read_text() == "mine\n" and pipe.is_fifo()
