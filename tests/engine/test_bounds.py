"""The engine's optimizer and loss settings at and past their bounds, and optimizer state across checkpoints:
each refused with the field named, or carried over whole."""

import math

import pytest

import rlnb
from rlnb import samples, wire


def local_session(**kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("record", False)
    return rlnb.connect("local", **kw)


@pytest.mark.parametrize("loss", ["dro", "grpo"])
def test_a_penalty_past_float32_is_refused_naming_it_not_a_nan_loss(loss):
    """``beta=1e39`` (the wire took any finite double) is inf in the loss's float32, and inf·0 NaN at every masked
    position: the forward-backward failed ``NON_FINITE_LOSS`` "loss is nan", whatever the samples, naming nothing."""
    with pytest.raises(ValueError, match=r"beta\n.*less than or equal to 3402823466"):
        wire.loss_config(loss, {"beta": 1e39})
    sample = samples.policy([1, 2], [3, 4], [-1.0, -1.0], 1.0, reference_logprobs=[-1.0, -1.0])
    field = wire.LOSS_PARAMS_FIELD[wire.LOSS_NAMES[loss]]
    params = wire.LOSSES[wire.LOSS_NAMES[loss]].params.model_construct(beta=1e39)  # as a crafted body would carry
    config = wire.LossConfig.model_construct(type=wire.LOSS_NAMES[loss], **{field: params})
    with local_session(model="tiny") as s:
        says = r"param 'beta' .* must be a finite number in \[0, 3\.40282e\+38\]"
        with pytest.raises(rlnb.OperationFailed, match=says):
            s.forward_backward([sample], config).result(timeout=30)
        assert all(p.grad is None for p in s.backend.trainer.parameters())
        assert math.isfinite(s.forward_backward([sample], loss, {"beta": 1e30}).result(timeout=30).loss)

