"""A forward-backward trains on its samples as they were when it was submitted: the operation runs later, on the
worker, and a caller's ``Sample`` is mutable (a loop reusing one, editing its weights in place)."""

import threading

import pytest

import rlnb
from rlnb import samples


def test_editing_a_sample_after_forward_backward_returns_does_not_change_what_it_trains_on(monkeypatch):
    """The body kept the caller's ``Sample`` objects: an edit made after ``forward_backward()`` returned, before the
    worker ran it, was what the operation computed (and trained on)."""
    with rlnb.connect("local", model="tiny", device="cpu", record=False, threads=1) as s:
        sample = samples.cross_entropy(s.encode("n=1 m=2 n=3"))
        as_submitted = s.forward_backward([sample], forward_only=True).result(timeout=30).loss
        gate, original = threading.Event(), s.backend._threads.before

        def held(*args):
            assert gate.wait(60), "the test never released the worker"
            original(*args)

        monkeypatch.setattr(s.backend._threads, "before", held)  # the worker waits before its next operation
        op = s.forward_backward([sample], forward_only=True)
        tokens = sample.model_input.chunks[0].encoded_text.tokens
        tokens[:] = [t + 1 for t in tokens]
        sample.loss_fn_inputs["weights"].data[0::2] = [0.0] * len(sample.loss_fn_inputs["weights"].data[0::2])
        sample.loss_fn_inputs["target_tokens"] = samples.cross_entropy([1] * (len(tokens) + 1)).loss_fn_inputs[
            "target_tokens"
        ]
        gate.set()
        assert op.result(timeout=60).loss == as_submitted
        edited = s.forward_backward([sample], forward_only=True).result(timeout=30).loss
        assert edited != pytest.approx(as_submitted)  # the edits change the loss: the check above could fail
