"""Sampled rollouts of many rows as one policy-loss batch, in the positions ``samples.policy`` uses.

``samples.policy(prompt, completion, logprobs, advantage)`` builds one wire sample per rollout: model input
``(prompt + completion)[:-1]``, and in slot i (which describes token i + 1) the target token, the sampler's
log-prob, the advantage and a mask that is 1 on completion tokens only. Batched trials have hundreds of
rollouts per step, so ``policy_batch`` builds the same numbers for all of them at once, as right-padded
``[rows, width]`` tensors (padding: token 0, mask 0), with a few gathers instead of Python loops per token;
``sample_output`` is what a sample operation returns for some of those rows, and ``member_losses`` each
member's loss over its rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlnb import wire
from rlnb.batched.losses import stacked_losses
from rlnb.engine import handlers, losses
from rlnb.engine.sampling import LENGTH, STOP, Drawn
from rlnb.errors import OperationError


@dataclass
class PolicyBatch:
    """``[rows, width]`` tensors, and each row's real length (``len(prompt) + len(completion) - 1``)."""

    ids: Tensor
    targets: Tensor
    logprobs: Tensor
    advantages: Tensor
    mask: Tensor
    lengths: Tensor

    def cut(self, t: Tensor, start: int, stop: int) -> list[Tensor]:
        """Rows ``[start, stop)`` of ``t`` (``[rows, width]``), each cut to its length: one select and one split."""
        keep = torch.arange(t.shape[1], device=t.device) < self.lengths[start:stop, None]
        return list(t[start:stop][keep].split(self.lengths[start:stop].tolist()))

    def inputs(self, start: int, stop: int) -> list[dict[str, Tensor]]:
        """Rows ``[start, stop)`` as the per-sample inputs of a policy loss (``losses.compute``)."""
        named = {
            "target_tokens": self.targets,
            "logprobs": self.logprobs,
            "advantages": self.advantages,
            "mask": self.mask,
        }
        cols = {key: self.cut(t, start, stop) for key, t in named.items()}
        return [dict(zip(cols, x, strict=True)) for x in zip(*cols.values(), strict=True)]


@dataclass
class MemberLoss:
    """One member's forward-backward: the operation's result, or its error (an API error code, and the message a
    session gives)."""

    result: wire.ForwardBackwardResult | None = None
    error: tuple[wire.OperationErrorCode, str] | None = None


def member_losses(
    lp: Tensor,
    entropy: Tensor,
    batch: PolicyBatch,
    members: int,
    loss_type: str,
    loss_params: dict[str, Any] | None,
    horizon: int,
) -> tuple[list[MemberLoss], Tensor | None]:
    """Each member's loss over its ``rows / members`` rows of ``batch``, from its rows of the policy's log-probs
    ``lp`` and entropies ``entropy`` (``[rows, width]``): what ``losses.compute`` gives on that member's samples
    alone, as the forward-backward handler computes it for a session (a non-finite loss or metric is
    ``NON_FINITE_LOSS``; ``horizon`` is FIXED_HORIZON's constant, the model's context length). Also the sum of
    the losses of the members that have a result, to backpropagate (None: no member has one). All members'
    losses are computed at once (``rlnb.batched.losses``)."""
    first = batch.inputs(0, 1)
    try:  # the inputs are built here: only the loss params can break the loss's contract, so check once
        params = losses.validate(loss_type, loss_params, first, [len(first[0]["target_tokens"])])
    except losses.InvalidLossInput as exc:
        return [MemberLoss(error=(wire.OperationErrorCode.INVALID_INPUT, str(exc)))] * members, None
    rows = lambda t: t.view(members, -1, t.shape[-1])  # noqa: E731
    loss, metrics = stacked_losses(loss_type, params, rows(lp), rows(batch.logprobs), rows(batch.advantages),
                                   rows(batch.mask), rows(entropy), horizon)  # fmt: skip
    values = loss.detach().tolist()
    out: list[MemberLoss] = []
    for k, (value, named) in enumerate(zip(values, metrics, strict=True)):
        if not (math.isfinite(value) and all(math.isfinite(v) for v in named.values())):
            try:  # the session's own check, for its error
                handlers.finite_loss(loss[k], named)
            except OperationError as exc:
                out.append(MemberLoss(error=(exc.code, str(exc))))
                continue
        out.append(MemberLoss(wire.ForwardBackwardResult(loss=value, metrics=named)))
    ok = [r.result is not None for r in out]
    if all(ok):
        return out, loss.sum()
    if not any(ok):
        return out, None
    # a failed member's non-finite values would turn its zero share of the gradient into NaN: its rows again,
    # detached, so that it gets none (as a session's failed forward-backward accumulates nothing)
    keep = torch.tensor(ok, device=lp.device)[:, None, None]
    lp = torch.where(keep, rows(lp), rows(lp).detach())
    loss, _ = stacked_losses(loss_type, params, lp, rows(batch.logprobs), rows(batch.advantages), rows(batch.mask),
                             rows(entropy), horizon)  # fmt: skip
    return out, loss[keep[:, 0, 0]].sum()


def policy_batch(
    prompts: Sequence[Sequence[int]], prompt_of_row: Sequence[int], drawn: Drawn, advantages: Sequence[float]
) -> PolicyBatch:
    """Row r's rollout is ``prompts[prompt_of_row[r]]`` followed by ``drawn``'s row r (its first
    ``lengths[r]`` tokens), with ``advantages[r]`` on each completion token."""
    device = drawn.tokens.device
    steps = drawn.tokens.shape[1]
    longest = max(len(p) for p in prompts)
    table = torch.zeros(len(prompts), longest, dtype=torch.long)
    for i, p in enumerate(prompts):
        table[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
    which = torch.tensor(list(prompt_of_row), dtype=torch.long, device=device)
    plen = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)[which]  # (R,)
    full = torch.cat([table.to(device)[which], drawn.tokens], dim=1)  # (R, longest + steps): prompt, then completion
    total = plen + drawn.lengths  # tokens of each rollout
    width = int(total.max()) - 1
    j = torch.arange(width + 1, device=device)[None, :]  # position in the rollout
    src = torch.where(j < plen[:, None], j, longest + j - plen[:, None]).clamp(max=full.shape[1] - 1)
    seq = torch.where(j < total[:, None], full.gather(1, src), 0)  # (R, width + 1), right-padded with 0
    slot = j[:, :width]
    mask = (slot >= plen[:, None] - 1) & (slot < total[:, None] - 1)  # slot i describes token i + 1
    picked = drawn.logprobs.gather(1, (slot - plen[:, None] + 1).clamp(0, max(steps - 1, 0)))
    adv = torch.tensor(list(advantages), dtype=torch.float32, device=device)[:, None].expand_as(picked)
    return PolicyBatch(
        ids=seq[:, :width].masked_fill(slot >= total[:, None] - 1, 0),  # the last token is a target only
        targets=seq[:, 1:],
        logprobs=torch.where(mask, picked, 0.0),
        advantages=torch.where(mask, adv, 0.0),
        mask=mask.long(),
        lengths=total - 1,
    )


@dataclass
class DrawnLists:
    """``Drawn``'s rows as Python lists, read from the tensors once for every member's sample record."""

    tokens: list[list[int]]
    logprobs: list[list[float]]
    lengths: list[int]
    stopped: list[bool]

    @classmethod
    def of(cls, drawn: Drawn) -> DrawnLists:
        return cls(drawn.tokens.tolist(), drawn.logprobs.tolist(), drawn.lengths.tolist(), drawn.stopped.tolist())


def sample_output(drawn: DrawnLists, prompts: Sequence[int], n: int, rows: range, version: int) -> wire.SampleOutput:
    """What a sample operation returns for ``prompts`` (each one's tokens) x ``n`` of ``drawn``'s rows (from
    ``rows.start``), generated by weights ``version``: the record of a member's sample. A prompt's samples after
    the first reused its prefill (``prompt_cache_hit_tokens``, as ``sampling.generate`` reports them)."""
    pick = slice(rows.start, rows.stop)
    # our own decoded values, valid by construction; every field given, as a default left out costs pydantic ~5
    # Python calls a row to look up, and the ones a sample sets marked set (what a dump with exclude_unset writes)
    seqs = [
        wire.SampledSequence.model_construct(
            {"tokens", "logprobs", "stop_reason", "prompt_cache_hit_tokens"},
            tokens=t[:k],
            logprobs=lp[:k],
            stop_reason=STOP if s else LENGTH,
            prompt_cache_hit_tokens=prompts[i // n] if i % n else 0,
            routed_experts_key=None,
            text=None,
        )
        for i, (t, lp, k, s) in enumerate(
            zip(drawn.tokens[pick], drawn.logprobs[pick], drawn.lengths[pick], drawn.stopped[pick], strict=True)
        )
    ]
    segment = [wire.PolicyVersionSegment(start_token=0, version=version)]
    groups = [seqs[p * n : (p + 1) * n] for p in range(len(prompts))]
    return wire.SampleOutput(results=[wire.SampleResult(policy_segments=segment, sequences=g) for g in groups])
