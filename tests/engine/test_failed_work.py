"""An operation whose own work fails part way leaves the session as a failure should: a ``SystemExit`` raised by a
model's forward (a library's ``sys.exit()``, ``pytest.fail()``) fails that operation, and the worker goes on (the
worker thread ended in silence: the operation RUNNING for ever, every later one PENDING, ``close()`` leaving them
unfinished); a backward that fails part way (out of memory) drops every gradient accumulated since the last
optim-step and says so (it left the head's gradients and not the body's: the next optim-step trained on them)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rlnb
from rlnb import samples, wire
from rlnb.wire import OperationErrorCode as Code

SEQ = [samples.cross_entropy(list(b"hello world"))]


class Model(nn.Module):
    """A byte model whose forward raises ``forward_raises`` once, or whose backward raises ``backward_raises`` once
    after the head's gradient is made and before the body's."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.mid, self.head = nn.Embedding(256, 16), nn.Linear(16, 16), nn.Linear(16, 256)
        self.forward_raises: BaseException | None = None
        self.backward_raises: BaseException | None = None

    def forward(self, ids):
        if self.forward_raises is not None:
            exc, self.forward_raises = self.forward_raises, None
            raise exc
        h = self.mid(self.emb(ids))
        if self.backward_raises is not None and h.requires_grad:
            exc, self.backward_raises = self.backward_raises, None

            def fail(grad):
                raise exc

            h.register_hook(fail)
        return self.head(h)


def test_a_system_exit_in_a_models_forward_fails_its_operation_and_the_session_goes_on():
    model = Model()
    with rlnb.connect("local", model=model, seed=0, record=False) as s:
        model.forward_raises = SystemExit("a library's sys.exit()")
        failed = s.forward_backward(SEQ)
        with pytest.raises(rlnb.OperationFailed, match="SystemExit: a library's sys.exit()") as caught:
            failed.result(timeout=60)
        assert caught.value.code == Code.INTERNAL_ERROR
        assert s.forward_backward(SEQ).result(timeout=60).loss > 0
        assert s.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result(timeout=60).step == 1


@pytest.mark.parametrize("kind", ["forward-backward", "custom-forward-backward"])
def test_a_backward_that_fails_part_way_drops_every_accumulated_gradient_and_says_so(kind):
    model = Model()
    with rlnb.connect("local", model=model, seed=0, record=False) as s:
        s.forward_backward(SEQ).result(timeout=60)  # an earlier batch's gradients, accumulated
        model.backward_raises = torch.OutOfMemoryError("CUDA out of memory (simulated)")
        if kind == "forward-backward":
            with pytest.raises(rlnb.OperationFailed) as caught:
                s.forward_backward(SEQ).result(timeout=60)
            code, message = caught.value.code, str(caught.value)
        else:
            body = wire.CustomForwardBackwardBody(samples=SEQ, gradients=[wire.GradientTensor(data=[0.1] * 10)])
            got: list[wire.Operation] = []
            s.backend.submit("custom-forward-backward", body, got.append)
            s.backend.wait_idle(60)
            code, message = got[-1].error.code, got[-1].error.message
        assert code == Code.RESOURCE_EXHAUSTED
        assert "the gradients accumulated since the last optim-step were dropped" in message
        assert [name for name, p in model.named_parameters() if p.grad is not None] == []
        before = model.head.weight.detach().clone()
        s.optim_step(rlnb.AdamParams(learning_rate=1e-2)).result(timeout=60)
        assert torch.equal(model.head.weight, before)  # nothing to train on: no step on the failed batch


def test_an_optim_step_the_engine_refuses_says_the_gradients_are_kept():
    """An eps that is 0 in the weights' float32 passes the params' own checks and is refused by the engine: nothing
    changed, and the next optim-step applies the gradients accumulated before (the message said nothing of them)."""
    with rlnb.connect("local", model=Model(), seed=0, record=False) as s:
        s.forward_backward(SEQ).result(timeout=60)
        with pytest.raises(rlnb.OperationFailed, match="eps") as caught:
            s.optim_step(rlnb.AdamParams(eps=1e-50)).result(timeout=60)
        assert caught.value.code == Code.INVALID_INPUT
        assert "the gradients accumulated since the last optim-step are kept for the next one" in str(caught.value)


def test_a_target_outside_the_vocabulary_is_named_with_its_position_and_minus_100_is_explained():
    """``target_tokens`` of -100 at a weight-0 position (Hugging Face's ignore index, in a batch made for its
    trainers): the refusal said "ids must be in [0, 256)" and named neither the value nor where it is."""
    with rlnb.connect("local", model="tiny", seed=0, record=False) as s:
        sample = samples.cross_entropy(list(b"hello"), weights=[0, 1, 1, 0, 1])  # target 2: weight 0
        sample.loss_fn_inputs["target_tokens"].data[2] = -100
        with pytest.raises(rlnb.OperationFailed) as caught:
            s.forward_backward([sample]).result(timeout=60)
    assert caught.value.code == Code.INVALID_INPUT
    message = str(caught.value)
    assert "target_tokens: ids must be in [0, 256), got -100 at position 2" in message
    assert "Hugging Face's ignore index" in message and "weight 0" in message
