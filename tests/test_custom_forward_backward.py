"""``Session.custom_forward_backward``: your own loss's per-token gradients backpropagated (R-new's
custom-forward-backward), on a local engine against a torch reference and on ``rlnb serve`` in process; its
arguments refused naming the field before anything is sent."""

import copy
import math

import httpx
import numpy as np
import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb.testing import FakeBackend
from tests.support.bigram import Bigram
from tests.support.server import Counter, app_client

SEQS = ([3, 4, 5, 6], [7, 2, 9])
WEIGHTS = ([0.0, 0.25, 1.0, 3.0], [0.0, 1.0, 0.5])  # weights[0] is never predicted
GRADS = ([0.5, -1.0, 2.0], [-0.75, 1.5])  # one per predicted token: the model_input is seq[:-1]
COMPLETED = wire.OperationStatus.COMPLETED


def test_the_gradient_is_the_weighted_sum_of_the_callers_gradients_times_each_log_probs():
    """Σ_i Σ_t w_t·g_t·∇lp_t over two samples, against torch's autograd of that sum on a copy of the model; the
    operation completes with an empty result, is recorded as the session's custom-forward-backward, and its
    gradients add to a forward-backward's until the optim-step."""
    model = Bigram()
    ref = copy.deepcopy(model)
    total = torch.zeros(())
    for seq, w, g in zip(SEQS, WEIGHTS, GRADS, strict=True):
        lp = torch.log_softmax(ref(torch.tensor(seq[:-1])), -1).gather(-1, torch.tensor(seq[1:])[:, None])[:, 0]
        total = total + (lp * torch.tensor(g) * torch.tensor(w[1:])).sum()
    total.backward()
    with rlnb.connect("local", model=model, device="cpu", record=False) as s:
        batch = [samples.cross_entropy(seq, w) for seq, w in zip(SEQS, WEIGHTS, strict=True)]
        op = s.custom_forward_backward(batch, [GRADS[0], np.array(GRADS[1])])  # a list, an array
        assert op.result(timeout=60) == wire.CustomForwardBackwardResult() and op.status == COMPLETED
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.grad, dict(ref.named_parameters())[name].grad, msg=name)
        assert [r.kind for r in s.history.records] == [wire.OperationKind.CUSTOM_FORWARD_BACKWARD]
        custom = model.hidden.weight.grad.clone()
        s.forward_backward([samples.cross_entropy(SEQS[0], WEIGHTS[0])]).result(timeout=60)  # g = -1: cross-entropy
        model.zero_grad()
        s.custom_forward_backward([samples.cross_entropy(SEQS[0], WEIGHTS[0])], [[-1.0] * 3]).result(timeout=60)
        alone = model.hidden.weight.grad.clone()
        model.zero_grad()
        s.forward_backward([samples.cross_entropy(SEQS[0], WEIGHTS[0])]).result(timeout=60)
        torch.testing.assert_close(alone, model.hidden.weight.grad)
        assert not torch.equal(custom, alone)


BAD = [
    ("gradients has 1 entries for 2 samples: give one per sample", [GRADS[0]], None),
    (r"gradients\[1\] has 3 values for the 2 tokens of samples\[1\]", [GRADS[0], [1.0, 2.0, 3.0]], None),
    (r"gradients\[0\] must be finite numbers, got nan", [[0.5, math.nan, 1.0], GRADS[1]], None),
    (r"gradients\[1\] must be numbers a float32 holds .*, got 1e\+39", [GRADS[0], [1e39, 0.0]], None),
    (r"gradients\[0\] must be numbers, got 'x'", [["x", 0.0, 0.0], GRADS[1]], None),
    (r"gradients must be a list with one gradient per sample .* got dict", {"data": GRADS[0]}, None),
    (r"samples\[1\]\.loss_fn_inputs\.target_tokens is required", list(GRADS), "no targets"),
    (r"samples is empty", [], "empty"),
]


@pytest.mark.parametrize(("said", "gradients", "samples_case"), BAD)
def test_its_arguments_are_refused_naming_the_field_before_anything_is_sent(said, gradients, samples_case):
    """Each refusal is a ``ValueError`` or ``TypeError`` naming ``gradients[i]`` or ``samples[i]``; no operation is
    submitted (the history records none), where the engine would have failed it after the trip."""
    batch = [samples.cross_entropy(seq, w) for seq, w in zip(SEQS, WEIGHTS, strict=True)]
    if samples_case == "no targets":
        batch[1] = wire.Sample(model_input=batch[1].model_input, loss_fn_inputs={})
    elif samples_case == "empty":
        batch = []
    with rlnb.Session(FakeBackend("adam"), record=False) as s:
        with pytest.raises((ValueError, TypeError), match=said):
            s.custom_forward_backward(batch, gradients)
        assert s.history.records == []


def test_a_gradient_tensor_or_its_dict_is_taken_as_it_is():
    """``rlnb.samples.gradient`` and the wire's own ``GradientTensor`` (or its dict, with a dtype) pass unchanged."""
    batch = [samples.cross_entropy(seq, w) for seq, w in zip(SEQS, WEIGHTS, strict=True)]
    given = [samples.gradient(GRADS[0]), {"data": GRADS[1], "dtype": "D_TYPE_FLOAT32"}]
    with rlnb.Session(FakeBackend("adam"), record=False) as s:
        assert s.custom_forward_backward(batch, given).result(timeout=30) == wire.CustomForwardBackwardResult()
    assert samples.gradient(GRADS[0]) == wire.GradientTensor(data=GRADS[0])
    with pytest.raises(ValueError, match=r"^g must be finite numbers, got inf$"):
        samples.gradient(wire.GradientTensor(data=[math.inf]), "g")


@pytest.mark.slow  # the app, in process, and two tiny sessions
def test_a_remote_session_sends_it_to_rlnb_serve_and_trains_as_cross_entropy_does(tmp_path):
    """Over the wire: one POST to custom-forward-backward, COMPLETED; with g = -1 (cross-entropy's dℓ/d lp) and an
    optim-step, the remote session's weights move as a local session's of the same model (the same weights) under the
    built-in cross-entropy (the log-probs of a forward-only pass compared). A refused call sends nothing."""
    batch = [samples.cross_entropy(seq, w) for seq, w in zip(SEQS, WEIGHTS, strict=True)]
    minus = [[-1.0] * 3, [-1.0] * 2]
    probe = [samples.cross_entropy([1, 2, 3, 4, 5], [0, 1, 1, 1, 1])]
    params = rlnb.AdamParams(learning_rate=0.05)
    with app_client(tmp_path / "ckpt") as c:
        counter = Counter(c)
        with rlnb.connect("http://testserver", optimizer="adam", base_model="rlnb/tiny", record=False,
                          transport=httpx.MockTransport(counter), max_retries=0) as remote:  # fmt: skip
            start = remote.forward_backward(probe, forward_only=True, return_loss_fn_outputs=True).result(timeout=120)
            before = len(counter.sent)
            with pytest.raises(ValueError, match=r"gradients\[0\] has 2 values for the 3 tokens of samples\[0\]"):
                remote.custom_forward_backward(batch, [[1.0, 2.0], [1.0, 2.0]])
            assert counter.sent[before:] == []
            op = remote.custom_forward_backward(batch, minus)
            assert op.result(timeout=120) == wire.CustomForwardBackwardResult() and op.status == COMPLETED
            assert ("POST", f"/v1/rl/training-sessions/{remote.id}/operations/custom-forward-backward") in counter.sent
            remote.optim_step(params).result(timeout=120)
            got = remote.forward_backward(probe, forward_only=True, return_loss_fn_outputs=True).result(timeout=120)
    with rlnb.connect("local", model="tiny", optimizer="adam", device="cpu", record=False) as local:
        fresh = local.forward_backward(probe, forward_only=True, return_loss_fn_outputs=True).result(timeout=120)
        local.forward_backward(batch).result(timeout=120)
        local.optim_step(params).result(timeout=120)
        want = local.forward_backward(probe, forward_only=True, return_loss_fn_outputs=True).result(timeout=120)
    lps = [(r.loss_fn_outputs or [])[0].tensors["logprobs"].data for r in (start, fresh, got, want)]
    assert lps[0] == lps[1]  # the same weights to start from: the server's tiny is the local one
    assert np.allclose(lps[2], lps[3], rtol=0, atol=1e-5) and not np.allclose(lps[2], lps[0], rtol=0, atol=1e-3), lps
