"""A closed session's history given to a new session (``history=``) continues its run by the rules of ``run_id=``:
the same optimizer, the earlier sessions' setup kept in the config, a step of the new session's own, and the run
folder locked while the new session is open."""

from __future__ import annotations

import json

import pytest

import rlnb
from rlnb import samples
from rlnb.errors import RunLocked
from rlnb.history import History, RunContinuedWarning
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"hello given"))]
SESSION_FIELDS = ("optimizer", "seed", "backend")


def _first_session(runs, run_id: str = "r") -> rlnb.Session:
    """An Adam session of seed 0 that steps once, then feeds a forward-backward it never steps, and closes."""
    s = rlnb.Session(FakeBackend("adam", seed=0), runs_dir=runs, run_id=run_id)
    s.forward_backward(BATCH)
    s.optim_step().result(timeout=30)
    s.forward_backward(BATCH).result(timeout=30)  # fed, never stepped: the session ends
    s.close()
    return s


def _second_session(s: rlnb.Session) -> None:
    s.forward_backward(BATCH)
    s.optim_step().result(timeout=30)
    s.close()


def _config(run) -> dict:
    return json.loads((run / "config.json").read_text())


def test_a_closed_history_given_to_a_session_is_continued_as_its_run_id_continues_it(tmp_path):
    """review44c: ``Session(backend, history=closed.history)`` skipped every rule of ``run_id=``: a Muon session
    was taken on an Adam run (config.json then said muon), the earlier setup was written over at close, and its
    step 1 added the earlier session's unstepped forward-backward to its own loss (1.5, not 1.0)."""
    given = _first_session(tmp_path / "given")
    _first_session(tmp_path / "by_id")
    with pytest.raises(ValueError, match=r"run r was recorded with optimizer adam, and this session's is muon"):
        rlnb.Session(FakeBackend("muon", seed=7), given.history)
    assert _config(tmp_path / "given" / "r")["optimizer"] == "adam"  # nothing written
    with pytest.warns(RunContinuedWarning) as said:  # and that step 1 appears twice (a fresh backend)
        again = rlnb.Session(FakeBackend("adam", seed=7), given.history)  # its lock was let go
    assert any("run r continues a session set up otherwise (seed 0 -> 7)" in str(w.message) for w in said)
    _second_session(again)
    with pytest.warns(RunContinuedWarning):
        _second_session(rlnb.Session(FakeBackend("adam", seed=7), runs_dir=tmp_path / "by_id", run_id="r"))
    config, expected = _config(tmp_path / "given" / "r"), _config(tmp_path / "by_id" / "r")
    assert {k: config[k] for k in SESSION_FIELDS} == {"optimizer": "adam", "seed": 7, "backend": "fake"}
    assert config["continued_seq"] == expected["continued_seq"] == [3]
    assert [e["seed"] for e in config["earlier_sessions"]] == [e["seed"] for e in expected["earlier_sessions"]] == [0]
    assert given.history.config == config  # in memory as on disk
    steps = given.history.steps[["step", "loss"]].values.tolist()
    assert steps == [[1, 1.0], [1, 1.0]]  # the new session's step 1 is its own forward-backward's loss
    assert History.load(tmp_path / "given" / "r").steps[["step", "loss"]].values.tolist() == steps
    assert History.load(tmp_path / "by_id" / "r").steps[["step", "loss"]].values.tolist() == steps


def test_a_history_in_memory_given_to_a_session_of_another_optimizer_is_refused_too(tmp_path):
    first = rlnb.Session(FakeBackend("adam"), record=False)
    first.forward_backward(BATCH)
    first.optim_step().result(timeout=30)
    first.forward_backward(BATCH).result(timeout=30)
    first.close()
    with pytest.raises(ValueError, match=r"this history was recorded with optimizer adam, and this session's is muon"):
        rlnb.Session(FakeBackend("muon"), first.history)
    with pytest.warns(RunContinuedWarning, match="this history continues an earlier session that reached step 1"):
        _second_session(rlnb.Session(FakeBackend("adam"), first.history))  # a fresh backend starts at step 0 again
    assert first.history.steps.loss.tolist() == [1.0, 1.0]
    assert "run_id" not in first.history.config and first.history.config["continued_seq"] == [3]


def test_a_session_continuing_a_history_holds_its_run_until_it_closes(tmp_path):
    """review44c: a session given a closed history held no ``run.lock``: a session opened on the same run id took
    the run over, and the one still training went on in memory only."""
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    first.forward_backward(BATCH)
    first.optim_step().result(timeout=30)
    first.close()
    with pytest.warns(RunContinuedWarning):
        second = rlnb.Session(FakeBackend(), first.history)
    with pytest.raises(RunLocked, match="being written by another session"):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    with pytest.raises(RunLocked, match="being written by another session"):
        rlnb.connect("local", runs_dir=tmp_path, run_id="r", model=object())  # before the model is looked at
    _second_session(second)
    assert len(History.load(tmp_path / "r")) == 4  # every operation of both reached the folder
    with pytest.warns(RunContinuedWarning):
        third = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    with pytest.raises(RunLocked, match="being written by another session"):
        rlnb.connect("local", history=first.history, model=object())  # before the model is looked at
    _second_session(third)
    with pytest.raises(ValueError, match=r"written by another session since .*run_id='r' instead of history="):
        rlnb.Session(FakeBackend(), first.history)  # it lacks the third session's records: numbered twice
    assert len(first.history) == 4 and len(History.load(tmp_path / "r")) == 6


def test_a_real_session_given_a_closed_history_steps_its_own_loss(tmp_path):
    with rlnb.connect("local", optimizer="adam", seed=0, runs_dir=tmp_path, run_id="r") as first:
        first.forward_backward(BATCH)
        first.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result(timeout=60)
        first.forward_backward(BATCH).result(timeout=60)  # never stepped
    with pytest.raises(ValueError, match="run r was recorded with optimizer adam, and this session's is muon"):
        rlnb.connect("local", optimizer="muon", history=first.history)
    with pytest.warns(RunContinuedWarning), rlnb.connect("local", optimizer="adam", history=first.history) as again:
        own = again.forward_backward(BATCH).result(timeout=60).loss
        again.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result(timeout=60)
    assert first.history.steps.loss.iloc[-1] == pytest.approx(own)
    assert _config(tmp_path / "r")["optimizer"] == "adam"
