"""A batched step whose backward fails part way (out of memory): the ensemble keeps no gradient of it and says so in
the words a session's forward-backward says it with (``rlnb.engine.handlers``' ``_dropped``)."""

from __future__ import annotations

import pytest
import torch

import rlnb
from rlnb.batched import Member, run_batched
from rlnb.batched import stacked as stacked_mod

DROPPED = "the gradients accumulated since the last optim-step were dropped"
MEMBERS = [Member(rlnb.AdamParams(learning_rate=3e-3), seed=0), Member(rlnb.AdamParams(learning_rate=1e-3), seed=1)]


@pytest.mark.slow  # two tiny ensembles, three steps in all
def test_a_backward_that_runs_out_of_memory_keeps_no_gradient_and_says_so(monkeypatch):
    trained = run_batched("tiny", "adam", MEMBERS, steps=1, device="cpu", keep_weights=True, group_size=4)
    real, calls, grads = torch.autograd.grad, [0], []

    def second_fails(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:  # step 2's backward, as one that runs out of memory part way
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*args, **kwargs)

    real_keep = stacked_mod.StackedModel.keep

    def keep(self, index):  # the gradients the members leave with: none of the failed backward's, none of step 1's
        grads.append(self.grad.clone())
        return real_keep(self, index)

    monkeypatch.setattr(stacked_mod.torch.autograd, "grad", second_fails)
    monkeypatch.setattr(stacked_mod.StackedModel, "keep", keep)
    results = run_batched("tiny", "adam", MEMBERS, steps=3, device="cpu", keep_weights=True, group_size=4)
    for got, once in zip(results, trained, strict=True):
        assert got.status == "FAILED" and got.steps_done == 1
        assert "out of memory" in got.reason and DROPPED in got.reason, got.reason
        fb = got.history.df[got.history.df.kind == "forward-backward"]
        assert [str(s).rsplit("_", 1)[-1] for s in fb.status] == ["COMPLETED", "FAILED"]
        assert DROPPED in fb.error_message.iloc[-1]
        assert all(torch.equal(got.weights[n], w) for n, w in once.weights.items())  # step 1's weights only
    assert len(grads) == 1 and not grads[0].any()
