"""A session's forward-backward computes the policy's entropy only at the tokens its loss counts (the only ones
``loss/entropy/mean`` reads: not at prompts, nor at the padding of a batch's shorter samples), and a custom
forward-backward, whose result has no metrics, computes none. The entropy's work is V values a position read by
its ``exp`` (the model's forward and the loss here run no ``exp`` of their own)."""

from __future__ import annotations

import threading

import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb.engine import handlers, inputs, losses
from rlnb.testing.ops import OpCounter

pytestmark = pytest.mark.slow  # builds a session

EXP = "aten.exp.default"
PROMPTS, ANSWERS = (30, 5, 12), (10, 40, 1)
"""Three samples: prompt and answer tokens. 51 tokens counted of 95 positions, 132 padded (3 x the longest, 44)."""


@pytest.fixture
def engine(tmp_path):
    session = rlnb.connect("local", model="tiny", device="cpu", runs_dir=str(tmp_path), record=False, threads=1)
    yield session.backend.engine
    session.close()


def batch() -> list[wire.Sample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for p, a in zip(PROMPTS, ANSWERS, strict=True):
        tokens = torch.randint(0, 256, (p + a,), generator=g).tolist()
        out.append(samples.cross_entropy(tokens, [0.0] * p + [1.0, 0.5] * (a // 2) + [2.0] * (a % 2)))
    return out


def test_forward_backward_computes_the_entropy_only_at_the_tokens_its_loss_counts(engine):
    body = wire.ForwardBackwardBody(samples=batch(), loss=wire.loss_config("cross_entropy", None), forward_only=True)
    with OpCounter(elements=True) as count:
        result = handlers.run(engine, wire.OperationKind.FORWARD_BACKWARD, body, threading.Event())
    vocab = engine.adapter.vocab_size
    assert count.read[EXP] == sum(ANSWERS) * vocab  # was every padded position: 3 x 44 x 256
    # the metrics (entropy included) equal those of the entropy at every position, to the last bit
    seqs, xs = inputs.read_samples(engine.adapter, body.samples)
    idx = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first=True)
    tgt = torch.nn.utils.rnn.pad_sequence([x["target_tokens"] for x in xs], batch_first=True)
    with torch.no_grad():
        lp, entropy = losses.logprobs_and_entropy(engine.adapter.forward(engine.trainer, idx), tgt)
    lens = [len(s) for s in seqs]
    params = losses.validate("LOSS_TYPE_CROSS_ENTROPY", None, xs, lens)
    loss, metrics = losses.compute(
        "LOSS_TYPE_CROSS_ENTROPY", params, [lp[b, :n] for b, n in enumerate(lens)], xs,
        horizon=engine.adapter.context_length, entropy=[entropy[b, :n] for b, n in enumerate(lens)],
    )  # fmt: skip
    assert result.metrics == metrics and result.loss == float(loss)
    assert metrics["loss/entropy/mean"] > 0 and metrics["loss/tokens"] == 7.5 + 30 + 2


def test_a_custom_forward_backward_computes_no_entropy(engine):
    body = wire.CustomForwardBackwardBody(
        samples=batch(), gradients=[wire.GradientTensor(data=[1.0] * (p + a - 1), dtype="D_TYPE_FLOAT32")
                                    for p, a in zip(PROMPTS, ANSWERS, strict=True)],
    )  # fmt: skip
    with OpCounter(elements=True) as count:
        handlers.run(engine, wire.OperationKind.CUSTOM_FORWARD_BACKWARD, body, threading.Event())
    assert count.read[EXP] == 0  # was every padded position's
    assert count.ops["aten.mm.default"] > 0  # the count saw the forward and backward
    assert all(p.grad is not None for p in engine.trainer.parameters())


def test_a_sample_whose_every_position_counts_selects_no_positions(engine):
    """Supervised text without a prompt: the entropy at every position, as before ``where``, with none of the ops
    that select positions (``nonzero``, ``index_select``): they would spare nothing."""
    tokens = list(b"every token of this sample counts")
    body = wire.ForwardBackwardBody(samples=[samples.cross_entropy(tokens)], loss=wire.loss_config("cross_entropy"))
    with OpCounter(elements=True) as count:
        result = handlers.run(engine, wire.OperationKind.FORWARD_BACKWARD, body, threading.Event())
    assert count.read[EXP] == (len(tokens) - 1) * engine.adapter.vocab_size
    assert count.ops["aten.nonzero.default"] == count.ops["aten.index_select.default"] == 0
    assert result.metrics["loss/tokens"] == len(tokens) - 1 and result.metrics["loss/entropy/mean"] > 0
