"""The policy's log-prob of each target token and its entropy, from a model's logits in one pass over their
log-softmax: what every loss reads (``rlnb.engine.losses``), a session's forward-backward and a batched ensemble's."""

import torch

ENTROPY_ROWS = 256
"""Positions per chunk of the entropy: one chunk's probabilities at a time, not the whole batch's."""


def logprobs_and_entropy(
    logits: torch.Tensor, targets: torch.Tensor, where: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-prob of each target token (differentiable) and the policy's entropy in nats at each position
    (no gradient), from ``logits`` ``[..., V]`` and ``targets`` ``[...]``. The entropy reuses the
    log-softmax the log-probs need, a chunk of positions at a time, so it costs one pass over it.

    ``where`` (bool, ``targets``' shape): the entropy only at the positions it marks, 0 at the others, which no
    metric reads (a batched ensemble's prompts and padding): a chunk of ``ENTROPY_ROWS`` of those positions at a
    time, each the same sum over V, though a reduction's split over threads or GPU blocks can depend on the rows
    in a chunk (its last bits)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    lp = logp.gather(-1, targets[..., None])[..., 0]
    with torch.no_grad():  # a view of it, no ``detach`` (an op): nothing here records a gradient
        flat = logp.reshape(-1, logp.shape[-1])
        if where is not None:
            entropy = flat.new_zeros(flat.shape[0])
            for at in where.reshape(-1).nonzero()[:, 0].split(ENTROPY_ROWS):
                entropy[at] = _entropy(flat.index_select(0, at))
            return lp, entropy.reshape(logp.shape[:-1])
        if len(flat) <= ENTROPY_ROWS:  # one chunk: no ``split`` (an op) of what is one already, nor a ``cat``
            entropy = _entropy(flat).reshape(logp.shape[:-1])
        else:
            entropy = torch.cat([_entropy(c) for c in flat.split(ENTROPY_ROWS)]).reshape(logp.shape[:-1])
    return lp, entropy


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """-Σ p·log p over the last axis; a log-prob of -inf (p = 0) adds 0, not NaN."""
    return -(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1)
