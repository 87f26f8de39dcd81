"""One RL step, the loop the API is made for: sample → reward → GRPO forward-backward → optim-step →
weights-sync (``rl_step``), and what it reports (``StepReport``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlnb import samples
from rlnb.params import OptimizerParams
from rlnb.session import Session
from rlnb.tasks.task import Task


@dataclass
class StepReport:
    """What one RL step produced (the operations stay in the session's history)."""

    step: int
    reward: float
    loss: float
    grad_norm: float
    status: str
    rewards: list[float] = field(default_factory=list)


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """GRPO advantages: each reward minus its group's mean, over the group's std (0 if all equal)."""
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    return [(r - mean) / std if std > 1e-8 else 0.0 for r in rewards]


def rl_step(
    session: Session,
    task: Task,
    params: OptimizerParams,
    *,
    group_size: int = 8,
    temperature: float = 1.0,
    seed: int | None = None,
    loss: str = "grpo",
    loss_params: dict[str, Any] | None = None,
) -> StepReport:
    """One RL step. Waits only for the samples; forward-backward, optim-step and weights-sync are
    submitted back to back and pipeline on the session's queue. ``params`` are checked first."""
    params = session.check_params(params)
    prompts = [session.encode(p) for p in task.prompts]
    sampled = session.sample(
        prompts, num_samples=group_size, max_tokens=task.max_tokens, temperature=temperature, seed=seed
    ).result()
    batch, rewards = [], []
    for ids, result in zip(prompts, sampled.results, strict=True):
        text = session.decode(ids)
        group = [task.reward(text, seq.text if seq.text is not None else session.decode(seq.tokens))
                 for seq in result.sequences]
        rewards.extend(group)
        for seq, adv in zip(result.sequences, group_advantages(group), strict=True):
            batch.append(samples.policy(ids, list(seq.tokens), seq.logprobs or [], adv))
    fb = session.forward_backward(batch, loss, loss_params)
    opt = session.optim_step(params)
    session.weights_sync()
    out = opt.result()  # raises OperationFailed (e.g. NON_FINITE_LOSS) after recording it
    metrics = out.metrics or {}
    return StepReport(
        step=int(out.step),
        reward=statistics.fmean(rewards),
        loss=fb.result().loss,
        grad_norm=float(metrics.get("grad_norm", float("nan"))),
        status=opt.status,
        rewards=rewards,
    )
