"""Toy RL tasks small enough to learn in a minute on two CPU cores, and one RL step.

A task is a few prompts plus a reward on the decoded completion, so the same task runs on the
byte-level built-in models and on any Hugging Face model with its tokenizer (the session's codec
turns text into tokens and back). ``rl_step`` runs the loop the API is made for: sample → reward →
GRPO forward-backward → optim-step → weights-sync.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlnb import samples
from rlnb.params import OptimizerParams
from rlnb.session import Prompt, Session


def digit_fraction(text: str) -> float:
    """Fraction of the characters of ``text`` that are the digits 0-9 (0 for empty text)."""
    return sum("0" <= c <= "9" for c in text) / max(len(text), 1)


@dataclass
class Task:
    """Prompts (text, token ids or chat messages) and a reward in [0, 1] on the decoded completion."""

    name: str
    prompts: list[Prompt]
    reward: Callable[[str, str], float]
    """``reward(prompt_text, completion_text) -> float``."""
    max_tokens: int = 8


def digits_task() -> Task:
    """Answer in digits: the reward is the fraction of the decoded completion's characters that are digits.

    A fresh byte-level model emits a digit about 4% of the time (10 of 256 bytes), so the reward
    starts near 0.04 and a working RL loop drives it towards 1.
    """
    prompts: list[Prompt] = ["n=", "x: ", "id ", "pin:", "code ", "num="]
    return Task("digits", prompts, lambda _prompt, completion: digit_fraction(completion))


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
