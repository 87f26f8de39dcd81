"""Toy RL tasks small enough to learn in a minute on two CPU cores, and one RL step.

The built-in model speaks bytes, so a task is a few text prompts plus a reward on the sampled
bytes. ``rl_step`` runs the loop the API is made for: sample → reward → GRPO forward-backward →
optim-step → weights-sync.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlnb import samples
from rlnb.params import AdamParams, MuonParams, OptimizerParams
from rlnb.session import Session


def _digit_fraction(text: bytes) -> float:
    return sum(48 <= b <= 57 for b in text) / max(len(text), 1)


@dataclass
class Task:
    """Prompts (token lists) and a reward on a completion's tokens, in [0, 1]."""

    name: str
    prompts: list[list[int]]
    reward: Callable[[list[int], list[int]], float]
    """``reward(prompt_tokens, completion_tokens) -> float``."""
    max_tokens: int = 8


def digits_task() -> Task:
    """Answer in digits: the reward is the fraction of completion bytes that are ASCII digits.

    A fresh byte-level model emits a digit about 4% of the time (10 of 256 bytes), so the reward
    starts near 0.04 and a working RL loop drives it towards 1.
    """
    prompts = [list(p.encode()) for p in ("n=", "x: ", "id ", "pin:", "code ", "num=")]
    return Task("digits", prompts, lambda _prompt, completion: _digit_fraction(bytes(completion)))


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


def check_params(session: Session, params: OptimizerParams) -> None:
    """Raise ``TypeError`` unless ``params`` fit the session's optimizer. Call it before submitting
    anything: a refused optim-step must not leave a forward-backward's gradients behind, to inflate
    the next step."""
    expected = AdamParams if session.optimizer == "adam" else MuonParams
    if not isinstance(params, expected):
        raise TypeError(
            f"this session's optimizer is {session.optimizer}: pass {expected.__name__}, not {type(params).__name__} "
            "(the optimizer is fixed when the session is created)"
        )


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
    check_params(session, params)
    sampled = session.sample(
        task.prompts, num_samples=group_size, max_tokens=task.max_tokens, temperature=temperature, seed=seed
    ).result()
    batch, rewards = [], []
    for prompt, result in zip(task.prompts, sampled.results, strict=True):
        group = [task.reward(prompt, list(seq.tokens)) for seq in result.sequences]
        rewards.extend(group)
        for seq, adv in zip(result.sequences, group_advantages(group), strict=True):
            batch.append(samples.policy(prompt, list(seq.tokens), seq.logprobs or [], adv))
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
