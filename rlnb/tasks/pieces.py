"""One RL step's batch in forward-backwards of at most the trainer's ``max_batch_size`` samples (a remote session's
supported-models says it; 256 in ``rlnb serve``, where the default task's step has 64 prompts × 16 = 1024), equal to
one forward-backward of the whole batch. Gradients add up until the optim-step, so each piece's advantages are
scaled to its share of the loss's aggregation over the whole batch, and the pieces' losses add up to its loss."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rlnb import samples, wire
from rlnb.errors import OperationFailed, OperationTimeout
from rlnb.session import Operation, Session
from rlnb.session.bodies import forward_backward_body
from rlnb.tasks.rollouts import Rollout
from rlnb.wire.loss_params import GRPO_PARAM_NAMES

_TOKEN_MEAN = GRPO_PARAM_NAMES["agg_type"]["TOKEN_MEAN"]


def batch_limit(session: Session, prompts: int, group_size: int) -> int | None:
    """The most samples one forward-backward of ``session`` takes (None: no limit said), or a ``ValueError`` before
    anything is sampled where the step's ``prompts`` × ``group_size`` samples cannot be sent in such pieces."""
    most = getattr(session.backend, "max_batch_size", None)
    if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
        raise ValueError(
            f"the step's {prompts} prompts × group_size {group_size} = {prompts * group_size} samples cannot be "
            f"trained: this model's max_batch_size (supported-models) is {most!r}, so no forward-backward takes one"
        )
    return most


def cuts(n: int, most: int | None) -> list[range]:
    """``range(n)`` in the fewest pieces of at most ``most`` (None: one piece), as equal as they can be."""
    k = 1 if most is None else max(1, math.ceil(n / most))
    ends = [n * i // k for i in range(k + 1)]
    return [range(a, b) for a, b in zip(ends, ends[1:], strict=False)]


def scales(config: wire.LossConfig, pieces: list[range], tokens: Sequence[int]) -> list[float]:
    """Each piece's factor on its advantages, so that the pieces' losses and gradients add up to the whole batch's:
    1 for a loss summed over tokens (every one but GRPO); GRPO's piece share of its divisor (trained tokens for
    TOKEN_MEAN, samples for FIXED_HORIZON and SEQUENCE_MEAN). Exact: ``rl_step``'s policy losses are linear in the
    advantages, and a positive factor keeps their clipping (its KL term, which is not, ``check_loss`` refuses).
    ``tokens``: each sample's trained tokens (its completion's)."""
    if len(pieces) == 1 or config.type != wire.LOSS_NAMES["grpo"]:
        return [1.0] * len(pieces)
    if config.grpo_params is not None and config.grpo_params.agg_type == _TOKEN_MEAN:
        whole = max(sum(tokens), 1)  # the loss's own divisor, 0 counting as 1
        return [max(sum(tokens[i] for i in p), 1) / whole for p in pieces]
    return [len(p) / len(tokens) for p in pieces]


def batches(
    session: Session, prompts: list[list[int]], results: list[wire.SampleResult], groups: list[list[Rollout]],
    loss: str, loss_params: dict[str, Any] | None,
) -> tuple[list[list[wire.Sample]], list[int]]:  # fmt: skip
    """The step's policy samples in forward-backwards of at most the session's ``max_batch_size`` (advantages
    scaled, ``scales``), and the tokens each trains (``joined``'s weights)."""
    rows = [
        (ids, seq, i, j, r.advantage)
        for i, (ids, result, group) in enumerate(zip(prompts, results, groups, strict=True))
        for j, (seq, r) in enumerate(zip(result.sequences, group, strict=True))
    ]
    pieces = cuts(len(rows), getattr(session.backend, "max_batch_size", None))
    tokens = [len(row[1].tokens) for row in rows]
    out = []
    for piece, f in zip(pieces, scales(wire.loss_config(loss, loss_params), pieces, tokens), strict=True):
        out.append([
            samples.policy(ids, list(seq.tokens), sampler_logprobs(seq, i, j, loss), adv * f)
            for ids, seq, i, j, adv in (rows[k] for k in piece)
        ])  # fmt: skip
    return out, [sum(tokens[k] for k in piece) for piece in pieces]


def send(
    session: Session, batches: list[list[wire.Sample]], loss: str, loss_params: dict[str, Any] | None
) -> list[Operation[wire.ForwardBackwardResult]]:
    """Submit each piece's forward-backward. Every body is built (and checked) first, so that a piece refused there (a
    sample past a remote trainer's ``max_seq_length``) sends none: one submitted before it would leave its gradients
    for the next step's optim-step. Each is sent as built, once."""
    bodies = [
        forward_backward_body(session.backend, b, loss, loss_params, forward_only=False, return_loss_fn_outputs=False)
        for b in batches
    ]
    return [session._forward_backward_built(body) for body in bodies]


def joined(results: list[wire.ForwardBackwardResult], tokens: list[int]) -> wire.ForwardBackwardResult:
    """The pieces' results as one forward-backward of the whole batch: their (scaled) losses add up, and so does
    ``loss/tokens``; every other metric, a mean over a piece's ``tokens``, is their mean weighted by them."""
    if len(results) == 1:
        return results[0]
    whole = max(sum(tokens), 1)
    said = [r.metrics or {} for r in results]
    metrics = {
        key: sum(m[key] for m in said)
        if key == wire.LossMetric.TOKENS
        else sum(m[key] * n for m, n in zip(said, tokens, strict=True)) / whole
        for key in said[0]
        if all(key in m for m in said)
    }
    return wire.ForwardBackwardResult(loss=sum(r.loss for r in results), metrics=metrics or None)


def sampler_logprobs(seq: wire.SampledSequence, prompt: int, index: int, loss: str) -> list[float]:
    """A completion's sampler log-probs, which every policy loss reads; ``ValueError`` naming the completion where the
    sampler sent none (the API's ``logprobs`` is optional: ``samples.policy`` said "0 entries for 3 tokens")."""
    if seq.logprobs is None and seq.tokens:
        raise ValueError(
            f"prompts[{prompt}], completion {index}: the sampler returned no log-probs for its {len(seq.tokens)} "
            f"tokens, which the {loss!r} loss reads (its ratio to the policy): rl_step needs a sampler that sends them"
        )
    return seq.logprobs or []


def failed(
    fbs: list[Operation[wire.ForwardBackwardResult]], cause: OperationFailed, step: int | None
) -> OperationFailed:
    """``cause``, a piece's failure, saying what became of the step: with ``step`` (its optim-step COMPLETED: on
    ``rlnb serve``, which runs each operation as it comes, a piece that fails as it runs cannot stop the optim-step
    queued behind it) the step taken on the other pieces' gradients; else the gradients of the pieces that COMPLETED,
    left accumulated for the next optim-step."""
    done = sum(map(_ran, fbs))
    if step is not None:
        said = (
            f"the step's optim-step ran on the other pieces' gradients: step {step} was taken with {done} of "
            f"{len(fbs)} forward-backwards"
        )
    elif done:
        said = (
            f"{done} of {len(fbs)} forward-backwards' gradients stay accumulated: the next optim-step applies them "
            "with its own"
        )
    else:
        return cause
    message = f"{cause.message}; {said}" if cause.message else said
    return OperationFailed(cause.code, message, operation_id=cause.operation_id, kind=cause.kind)


SETTLE = 60.0
"""Seconds ``failed`` waits for a piece still in flight (sent, not yet polled) before it counts it as not run."""


def _ran(fb: Operation[wire.ForwardBackwardResult]) -> bool:
    """Whether a piece COMPLETED: one sent before the failed one may not be polled yet when the step's end is known."""
    try:
        fb.result(SETTLE)
    except (OperationFailed, OperationTimeout):
        return False
    return True
