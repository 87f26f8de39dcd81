"""A run continued after its process died mid-operation (``kill -9``, a kernel crash): ``ops.jsonl`` ends with an
operation's submission line and no end line. That operation can never finish, so a sink attached to the next
session must not wait for it: its step points go out as the session runs, not at ``close()`` (they waited there: a
crash again lost them all, and a long run's close could run out of time)."""

from __future__ import annotations

import json

import pytest

import rlnb
from rlnb import samples
from rlnb.history.runconfig import session_starts
from rlnb.sinks.points import Steps, merge
from rlnb.wire import OperationStatus

TEXT = [samples.cross_entropy(list(b"hello, notebook"))]
ADAM = rlnb.AdamParams(learning_rate=3e-3)


def killed_mid_forward_backward(runs) -> None:
    """A run of one step, then the line a forward-backward leaves when its process dies before it ends."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=runs, run_id="r") as s:
        s.forward_backward(TEXT)
        s.optim_step(ADAM).result()
    ops = runs / "r" / "ops.jsonl"
    last = json.loads(ops.read_text().splitlines()[-1])
    line = {**last, "seq": last["seq"] + 1, "kind": "forward-backward", "status": OperationStatus.PENDING.value,
            "op_id": "", "started_at": "NaN", "finished_at": "NaN", "step": 1, "loss": "NaN"}  # fmt: skip
    with ops.open("a") as f:
        f.write(json.dumps(line) + "\n")


@pytest.mark.filterwarnings("ignore::rlnb.history.runs.RunContinuedWarning")  # it starts at step 0 again
def test_a_sink_attached_to_a_continued_run_hears_its_steps_while_it_runs(tmp_path):
    killed_mid_forward_backward(tmp_path)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        assert any(rec.status not in rlnb.wire.TERMINAL_STATUSES for rec in s.history.records)  # the dead one
        steps = Steps(session_starts(dict(s.history.config)))  # as a sink's Attachment makes it
        steps.seed(s.history.records)
        heard: list = []
        s.history.on_record(lambda rec: heard.extend(steps.record(rec)))
        for _ in range(3):
            s.forward_backward(TEXT)
            s.optim_step(ADAM).result()
        made, _ = merge(heard)  # no drain(): what reached the sink while the session ran
        assert [p.step for p in made] == list(s.history.steps.step.iloc[-3:])
        assert [p.values["loss"] for p in made] == list(s.history.steps.loss.iloc[-3:])
