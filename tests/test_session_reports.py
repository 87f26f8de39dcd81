"""How a session's operation takes its backend's reports: each recorded once, in order, and a FAILED optim-step
counted as no step whatever the recording of its report did."""

from __future__ import annotations

import logging

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.params import params_for
from rlnb.session import bodies
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy([1, 2, 3])]


def test_an_on_record_callback_that_raises_on_a_failed_optim_step_still_counts_it_as_no_step(caplog):
    """The FAILED optim-step's report raised from ``history.update`` (a callback's bug, told after the record changed):
    the failure was then never counted, and everything submitted after it claimed a step one too high."""
    failed = iter([True, False])
    fail = lambda kind, body, step: "INVALID_INPUT" if kind == "optim-step" and next(failed) else None  # noqa: E731
    s = rlnb.Session(FakeBackend(fail=fail), record=False)

    def buggy(rec):
        if rec.status == wire.OperationStatus.FAILED:
            raise RuntimeError("a notebook's bug")

    s.history.on_record(buggy)
    with caplog.at_level(logging.ERROR, logger="rlnb"):
        s.forward_backward(BATCH)
        with pytest.raises(rlnb.OperationFailed, match="INVALID_INPUT"):
            s.optim_step().result(timeout=30)
        s.forward_backward(BATCH)
        s.optim_step().result(timeout=30)
    s.close()
    assert "a notebook's bug" in caplog.text  # logged, as before
    assert "or telling its listeners, failed" in caplog.text  # the record was written: a listener failed
    assert [(r.kind, wire.OperationStatus(r.status).name, r.step) for r in s.history.records] == [
        ("forward-backward", "COMPLETED", 0),
        ("optim-step", "FAILED", 0),
        ("forward-backward", "COMPLETED", 0),  # it said 1: the failure was not counted
        ("optim-step", "COMPLETED", 1),
    ]


def test_the_same_params_given_again_keep_their_check_and_any_change_is_checked_again():
    """A loop's ``hp`` given to each optim-step is checked once (``StepParams``, ~30 Python calls a step): a change to
    it after, through its checks or past them, still reaches the next step or is refused, and each record holds its
    own params."""
    backend = FakeBackend()
    s = rlnb.Session(backend, record=False)
    hp = rlnb.AdamParams(learning_rate=1e-3)
    try:
        s.optim_step(hp).result(timeout=30)
        s.optim_step(hp).result(timeout=30)
        s.optim_step(hp).result(timeout=30)
        hp.learning_rate = 2e-3  # through its checks
        s.optim_step(hp).result(timeout=30)
        object.__setattr__(hp, "learning_rate", -5.0)  # past them: refused, as a new object's check refuses it
        with pytest.raises(rlnb.InvalidParams, match=r"learning_rate = -5.0 is invalid"):
            s.optim_step(hp)
        object.__setattr__(hp, "learning_rate", 3e-3)
        s.optim_step(hp).result(timeout=30)
        hp.__pydantic_fields_set__.discard("learning_rate")  # unset past its checks: the default, not 3e-3
        s.optim_step(hp).result(timeout=30)
        hp.__pydantic_fields_set__.add("learning_rate")
        object.__setattr__(hp, "weight_decay", 0)  # an int where None was: checked again, a float in the body
        hp.__pydantic_fields_set__.add("weight_decay")
        s.optim_step(hp).result(timeout=30)
        hp.learning_rate = 1.0
        s.optim_step(hp).result(timeout=30)
        object.__setattr__(hp, "learning_rate", True)  # equal to 1.0, but no number: its type is compared too
        with pytest.raises(rlnb.InvalidParams, match=r"learning_rate = True is invalid"):
            s.optim_step(hp)
    finally:
        s.close()
    bodies = [body.adam_params for kind, body in backend.submitted if kind == wire.OperationKind.OPTIM_STEP]
    assert [b.learning_rate for b in bodies] == [1e-3, 1e-3, 1e-3, 2e-3, 3e-3, None, 3e-3, 1.0]
    assert type(bodies[-2].weight_decay) is float and bodies[-2].weight_decay == 0.0
    assert all(b is not hp for b in bodies)  # a checked copy: a later change does not reach a queued step
    records = s.history.records
    assert [r.params.get("learning_rate") for r in records] == [1e-3, 1e-3, 1e-3, 2e-3, 3e-3, None, 3e-3, 1.0]
    records[1].params["learning_rate"] = 9.0  # each record its own dict
    assert records[0].params["learning_rate"] == records[2].params["learning_rate"] == 1e-3


def test_the_same_muon_params_given_again_keep_their_check_and_a_change_to_their_adam_is_checked_again(monkeypatch):
    """A loop's ``MuonParams`` given to each optim-step is checked once, as ``AdamParams`` is (``StepParams``): a change
    to it or inside its ``adam`` (through their checks or past them), or another ``adam``, is checked again and reaches
    the next step or is refused; each record holds its own params, its ``adam`` dict too."""
    checks = []
    monkeypatch.setattr(bodies, "params_for", lambda kind, p: checks.append(p) or params_for(kind, p))
    backend = FakeBackend("muon")
    s = rlnb.Session(backend, record=False)
    hp = rlnb.MuonParams(learning_rate=0.02, adam=rlnb.AdamParams(learning_rate=1e-3))
    try:
        for _ in range(3):
            s.optim_step(hp).result(timeout=30)
        assert len(checks) == 1  # the same object, unchanged: its first check kept
        hp.adam.learning_rate = 2e-3  # inside its adam, through its checks
        s.optim_step(hp).result(timeout=30)
        object.__setattr__(hp.adam, "learning_rate", -5.0)  # past them: refused, as a new object's check refuses it
        with pytest.raises(rlnb.InvalidParams, match=r"learning_rate = -5.0 is invalid"):
            s.optim_step(hp)
        object.__setattr__(hp.adam, "learning_rate", 1.0)
        s.optim_step(hp).result(timeout=30)
        object.__setattr__(hp.adam, "learning_rate", True)  # equal to 1.0, but no number: its type is compared too
        with pytest.raises(rlnb.InvalidParams, match=r"learning_rate = True is invalid"):
            s.optim_step(hp)
        hp.adam = rlnb.AdamParams(learning_rate=3e-3)  # another adam
        s.optim_step(hp).result(timeout=30)
        hp.momentum = 0.5  # its own field
        s.optim_step(hp).result(timeout=30)
        s.optim_step(hp).result(timeout=30)
    finally:
        s.close()
    assert len(checks) == 7  # one a change (and each refusal), none for the repeats
    bodies_sent = [body.muon_params for kind, body in backend.submitted if kind == wire.OperationKind.OPTIM_STEP]
    assert [b.adam.learning_rate for b in bodies_sent] == [1e-3] * 3 + [2e-3, 1.0, 3e-3, 3e-3, 3e-3]
    assert [b.momentum for b in bodies_sent] == [None] * 6 + [0.5, 0.5]
    assert all(b is not hp and b.adam is not hp.adam for b in bodies_sent)  # checked copies
    records = s.history.records
    records[1].params["adam"]["learning_rate"] = 9.0  # each record its own adam dict
    assert records[0].params["adam"]["learning_rate"] == records[2].params["adam"]["learning_rate"] == 1e-3
