"""A hostile user's runs, continued: a damaged operation number, figures no standard JSON reader takes, a run that
holds only its config, and a later session whose clock is behind. Each must keep what was recorded, or say plainly
what it could not."""

import json

import pytest

import rlnb
from rlnb import samples
from rlnb.history import History
from rlnb.history.runs import RunContinuedWarning
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"sessions"))]


def one_step(session: rlnb.Session) -> None:
    session.forward_backward(BATCH)
    session.optim_step()
    session.wait()


def test_a_seq_that_leaves_no_room_is_skipped_as_damage_and_the_run_continues(tmp_path):
    """A hand-edited ``seq`` of 2**63 - 1 loaded (an int64 holds it), and the next session numbered its operations from
    2**63: its ``df`` failed (Int64 overflow) and its lines were left out of every later load."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as first:
        one_step(first)
    ops = tmp_path / "r" / "ops.jsonl"
    damaged = {**json.loads(ops.read_text().splitlines()[-1]), "seq": 2**63 - 1}
    with ops.open("a") as fh:
        fh.write(json.dumps(damaged) + "\n")
    line = len(ops.read_text().splitlines())
    said = rf"ops\.jsonl: skipped line {line} \(seq {2**63 - 1}\): a seq of {2**53} or more leaves no room"
    with pytest.warns(RunContinuedWarning), pytest.warns(RuntimeWarning, match=said):
        again = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    one_step(again)
    again.close()
    assert list(again.history.df.seq) == [0, 1, 2, 3]
    with pytest.warns(RuntimeWarning, match="leaves no room"):
        loaded = History.load(tmp_path / "r")
    assert list(loaded.df.seq) == [0, 1, 2, 3] and list(loaded.steps.step) == [1, 1]
