"""``losses.logprobs_and_entropy`` with ``where``: the entropy only at the positions a metric reads (a batched
ensemble's completion tokens), and ``losses.policy_loss``'s own refusal of a KL term with nothing to compare to."""

import math

import pytest
import torch

from rlnb.engine import losses
from rlnb.testing.ops import OpCounter

EXP = "aten.exp.default"
"""The entropy's p = e^log p (the log-softmax is one op of its own): the values it reads are the entropy's work."""


def test_the_entropy_is_computed_only_where_asked_and_equals_the_full_one_there():
    """Positions outside ``where`` are never read by the entropy (their NaN logits leave it 0, not NaN); at the
    others it is the entropy every position gets without ``where``, over several chunks of ``ENTROPY_ROWS``."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 300, 13, generator=g) * 3  # 900 positions: 4 chunks without where
    logits[0, 5, 2] = -math.inf  # a banned token: p log p = 0
    targets = torch.randint(0, 13, (3, 300), generator=g)
    where = torch.rand(3, 300, generator=g) < 0.6  # ~540 positions: 3 chunks with it
    where[0, 5] = True
    nan_logits = torch.where(where[..., None], logits, math.nan)
    with OpCounter(elements=True) as full:
        lp_all, entropy_all = losses.logprobs_and_entropy(logits, targets)
    with OpCounter(elements=True) as some:
        lp, entropy = losses.logprobs_and_entropy(nan_logits.requires_grad_(), targets, where)
    assert (full.read[EXP], some.read[EXP]) == (900 * 13, int(where.sum()) * 13)  # the work: only the rows asked for
    assert torch.equal(lp[where], lp_all[where]) and lp.requires_grad
    assert torch.equal(entropy[where], entropy_all[where])  # the same sum over V of each row, on this CPU
    assert torch.equal(entropy[~where], torch.zeros(int((~where).sum())))
    assert not entropy.requires_grad and entropy.shape == targets.shape
    _, none = losses.logprobs_and_entropy(nan_logits, targets, torch.zeros_like(where))
    assert torch.equal(none, torch.zeros(3, 300))  # nothing asked: no chunk at all


def test_grpos_kl_without_reference_log_probs_is_refused_by_policy_loss():
    """``compute`` always passes the reference log-probs when GRPO's beta > 0 (``validate`` requires them); a
    layout of its own that does not is told what is missing, not a TypeError of ``torch.where``."""
    lp = torch.tensor([-0.5, -1.0])
    params = losses.validate("LOSS_TYPE_GRPO", {"beta": 0.1}, [{
        "target_tokens": torch.tensor([1, 2]), "logprobs": lp, "advantages": torch.ones(2),
        "reference_logprobs": lp}], [2])  # fmt: skip
    with pytest.raises(ValueError, match="beta > 0 reads reference log-probs: none were given"):
        losses.policy_loss("LOSS_TYPE_GRPO", params, losses.Tokens(lp, lp, torch.ones(2), torch.ones(2)), None, 8)
