"""Two ops of the stacked model that write fewer elements than torch's own way: an ensemble's step time is the
elements its ops write, a member's ~12 M a step (``bench/bench_batched.py --ops``), so a pass less over a wide tensor
is time less for every member.

- ``linear``: a linear layer that vmap runs as one ``baddbmm`` (bias, then the product added to it). vmap's rule for
  ``F.linear`` with a weight per member is a ``bmm`` and a separate bias ``add``: a second pass over every layer's
  output. The same values bit for bit (MKL adds the product to the bias as the ``add`` does). A layer norm done the
  same way (one ``addcmul`` for its weight and bias) saved a pass too, yet took longer: the pass is narrow (64 wide)
  and the vmap rule's Python costs ~0.5 ms a call.
- ``target_logprobs``: the log-prob of each target token and the entropy at each position, from one log-softmax and
  its exp, and a backward from that exp: torch's gather backward writes a zero tensor and scatters into it,
  log-softmax's backward takes the exp again, and ``losses.logprobs_and_entropy``'s entropy copies each counted row,
  then writes its exp, a clamp and a product (4 passes over them). Here the entropy is one dot product a position
  (``bmm``: no tensor over the vocabulary written for it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


class _Linear(torch.autograd.Function):
    """``F.linear(x, weight, bias)``; under vmap one ``baddbmm`` over every member. Used under vmap only: autograd
    records the ``baddbmm`` that ``vmap`` runs, so no ``backward`` of its own (outside vmap a backward refuses)."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return nn.functional.linear(x, weight, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], x: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, int]:
        n = info.batch_size
        x, weight, bias = (_front(t, d, n) for t, d in zip((x, weight, bias), in_dims, strict=True))
        y = torch.baddbmm(bias[:, None], x.reshape(n, -1, x.shape[-1]), weight.transpose(1, 2))
        return y.view(*x.shape[:-1], weight.shape[1]), 0


def _front(t: Tensor, dim: int | None, n: int) -> Tensor:
    """``t`` with its members first: vmap's batch dim ``dim`` (None: the same for every member)."""
    return t.expand(n, *t.shape) if dim is None else t.movedim(dim, 0)


def linear(layer: nn.Linear, x: Tensor) -> Tensor:
    """``layer(x)`` under vmap, its bias added in the product's pass (``_Linear``) where a gradient is recorded (the
    forward-backward). A layer without a bias is one ``bmm`` under vmap already; and a decoding step (no gradient)
    is one token a row: there the rule's Python (~0.5 ms a call, measured) costs more than the pass it saves."""
    if layer.bias is None or not torch.is_grad_enabled():
        return nn.functional.linear(x, layer.weight, layer.bias)
    return _Linear.apply(x, layer.weight, layer.bias)


class _TargetLogprobs(torch.autograd.Function):
    """``(log p[target], -Σ p log p)`` a position; the backward of the first only (the entropy is a metric)."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        logp = torch.log_softmax(logits.float(), dim=-1)
        p = logp.exp()
        lp = logp.gather(-1, targets[..., None])[..., 0]
        V = logp.shape[-1]
        entropy = torch.bmm(p.view(-1, 1, V), logp.view(-1, V, 1)).view(lp.shape).neg_()
        ctx.save_for_backward(p, targets)
        ctx.mark_non_differentiable(entropy)
        return lp, entropy

    @staticmethod
    def backward(ctx: Any, g: Tensor, _: Tensor) -> tuple[Tensor, None]:
        """d log p[t] / d logits = onehot(t) - p: log-softmax's backward of the gathered gradient, as torch's."""
        p, targets = ctx.saved_tensors
        grad = p * g.neg()[..., None]
        return grad.scatter_add_(-1, targets[..., None], g[..., None]), None


def target_logprobs(logits: Tensor, targets: Tensor, where: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The log-prob of each target token (differentiable) and the policy's entropy in nats at each position where
    ``where`` is true (every position without it), 0 elsewhere (no gradient): ``losses.logprobs_and_entropy``'s
    values, the entropy summed in another order (~1e-7 relative). A log-prob of -inf (a logit of -inf: infinite
    weights) makes that position's entropy NaN, where ``losses`` counts it 0."""
    lp, entropy = _TargetLogprobs.apply(logits, targets)
    return lp, entropy if where is None else entropy.masked_fill_(~where, 0.0)
