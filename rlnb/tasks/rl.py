"""One RL step, the loop the API is made for: sample → reward → GRPO forward-backward → optim-step →
weights-sync (``rl_step``), and what it reports (``StepReport``)."""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from rlnb import _one_step, wire
from rlnb._input.checks import check_int, check_timeout, is_integer
from rlnb.errors import OperationFailed
from rlnb.history.figures import RLMetric
from rlnb.lifecycle import ctrl_c
from rlnb.params import OptimizerParams
from rlnb.session import Operation, Session
from rlnb.session.step_turn import STEP_WAIT
from rlnb.tasks import pieces
from rlnb.tasks.rollouts import (
    AdvantageScale,
    Rollout,
    completion_rows,
    prompt_texts,
    score_texts,
    step_metrics,
    unscored,
)
from rlnb.tasks.task import Task, check_group_size

SEED_STRIDE = 1_000_003
"""Step ``i`` of a run with seed ``s`` samples with seed ``s * SEED_STRIDE + i``: the demo, a lesson, a sweep trial,
Find LR and a batched member alike, so that the same seed draws the same samples wherever it runs."""


MAX_STEPS = SEED_STRIDE
"""The most RL steps one run takes (the demo, a lesson, a sweep trial, a batched member): seed ``s``'s step
``SEED_STRIDE`` would sample with seed ``s + 1``'s step-0 seed, so two seeds' runs would no longer be apart (and past
2**63 steps ``seed_range`` would turn over, a refusal that blames the seed)."""


STEPS_WHY = (
    f"step i of seed s samples with seed s * {SEED_STRIDE} + i: more steps would sample with the next seed's seeds"
)
"""Why ``MAX_STEPS`` bounds a run: said only past it (it explained nothing of N = 0)."""


def check_steps(steps: Any, low: int = 1, name: str = "steps", *, why: bool = True) -> int:
    """``steps`` as a plain int, or a ``ValueError`` naming ``name`` and [``low``, ``MAX_STEPS``], the reason for the
    top bound (``STEPS_WHY``) said past it, if ``why``: the one check of every entry that runs RL steps, made before
    anything runs."""
    above = why and (is_integer(steps) or isinstance(steps, float)) and steps > MAX_STEPS
    return check_int(name, steps, low, MAX_STEPS, why=STEPS_WHY if above else "")


def seed_range(steps: int) -> tuple[int, int]:
    """The run seeds whose every step seed (``seed * SEED_STRIDE + i``, ``i < steps``) is an int64, as the
    API's ``seed`` must be."""
    return -(2**63 // SEED_STRIDE), (2**63 - steps) // SEED_STRIDE


@dataclass
class StepReport:
    """What one RL step produced (the operations stay in the session's history)."""

    step: int
    reward: float
    loss: float
    grad_norm: float
    status: str
    rewards: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    """The step's RL metrics (``rlnb.tasks.RL_METRICS``), as logged to the history."""


def group_size_for(session: Session, task: Task, group_size: int | None = None) -> int:
    """``group_size`` (default: the task's), or a ``ValueError`` naming it unless it is an integer >= 2 (a group of
    one trains nothing) and, on the in-process engine, at most its cap (256 completions per prompt)."""
    most = getattr(session.backend, "max_num_samples", None)  # the in-process engine's cap, else None
    return check_group_size(task.group_size if group_size is None else group_size, most)


def rl_step(
    session: Session,
    task: Task,
    params: OptimizerParams,
    *,
    group_size: int | None = None,
    temperature: float = 1.0,
    seed: int | None = None,
    loss: str = "grpo",
    loss_params: dict[str, Any] | None = None,
    advantage_scale: AdvantageScale = "sample_std",
    step_timeout: float | None = STEP_WAIT,
) -> StepReport:
    """One RL step. Waits only for the samples; forward-backward, optim-step and weights-sync are
    submitted back to back and pipeline on the session's queue. ``params`` are checked first. One step at a time on a
    session (``session.stepping()``, from the samples to the end): another thread's step waits for this one to end, and
    this one waits for another's at most ``step_timeout`` seconds (default ``STEP_WAIT``, 600; None: no limit), then
    ``rlnb.SessionBusy``, nothing sent.

    ``group_size`` samples per prompt (default: the task's). Rewards read each completion's text without
    its EOS and special tokens; the loss trains on its tokens,
    EOS included. Advantages are ``group_advantages(rewards, advantage_scale)`` per prompt. The step's
    completions go to ``session.history.log_completions`` (also when its forward-backward or optim-step
    fails, and with NaN rewards when the reward raises or a Ctrl-C interrupts it), and its RL metrics
    (``rlnb.tasks.RL_METRICS``) to ``session.history.log``. At a ``temperature`` other than 1 the step is off-policy
    and nothing corrects for it: the samples come from the tempered policy, the loss's ratio compares untempered
    log-probs (docs/losses.md, "Temperature")."""
    params = session.check_params(params)
    check_loss(loss, loss_params)
    # before anything is sampled: else a bad one would be pydantic's error on num_samples, or (advantage_scale)
    # "scale" after the step's samples, whose completions would then be recorded unscored
    group_size = group_size_for(session, task, group_size)
    check_temperature(temperature)
    seed = check_int("seed", seed, -(2**63), 2**63 - 1, optional=True)  # the API's int64
    if advantage_scale not in get_args(AdvantageScale):
        scales = ", ".join(get_args(AdvantageScale))
        raise ValueError(f"advantage_scale must be one of {scales}, got {advantage_scale!r}")
    wait = check_timeout("step_timeout", step_timeout)
    pieces.batch_limit(session, len(task.prompts), group_size)  # before sampling: a batch no trainer takes
    refusal = getattr(session.backend, "half_stepped_refusal", None)  # a local session's: a step it would refuse
    said = refusal() if refusal is not None else None
    if said is not None:  # else a batch sampled and its gradients computed each try, then the optim-step refused
        raise OperationFailed(wire.OperationErrorCode.INVALID_INPUT, said, kind=wire.OperationKind.OPTIM_STEP)
    prompts = [session.encode(p) for p in task.prompts]
    with session.stepping(wait):  # one step at a time: another thread's forward-backward would join this optim-step
        sampled = session.sample(
            prompts, num_samples=group_size, max_tokens=task.max_tokens, temperature=temperature, seed=seed
        ).result()

        def plain(tokens: Sequence[int]) -> str:  # what a reward reads: no EOS, no special tokens
            return session.decode(tokens, skip_special=True)

        plain_prompts = prompt_texts(task, prompts, plain)
        texts = [plain(s.tokens) for r in sampled.results for s in r.sequences]
        try:  # each rollout built once, scored (``unscored`` then ``score`` built it twice)
            groups = score_texts(task, plain_prompts, sampled.results, texts, advantage_scale)
        except BaseException:  # the user's reward, Ctrl-C in a slow one, advantages that cannot train: kept unscored
            _keep_failed(session, unscored(plain_prompts, sampled.results, plain))
            raise
        opt: Operation[wire.OptimStepResult] | None = None
        try:  # in forward-backwards of at most the trainer's max_batch_size, adding up to one of the whole batch
            batch, tokens = pieces.batches(session, prompts, sampled.results, groups, loss, loss_params)
            # one step, sent whole: a Ctrl-C between them would leave a forward-backward queued whose gradients the
            # next step's optim-step applies with its own; one refused at its POST fails the rest unsent (one_step)
            with ctrl_c.held(), _one_step.one_step():
                fbs = pieces.send(session, batch, loss, loss_params)
                opt = session.optim_step(params)
                session.weights_sync()
        except BaseException:  # the step's completions kept, scored; a batch refused (a trainer's shorter context) is
            _keep_failed(session, groups, _made(opt))  # not sent; a Ctrl-C held until the step was sent comes here
            raise
        try:
            out = opt.result()  # raises OperationFailed (e.g. NON_FINITE_LOSS) after recording it
        except OperationFailed:
            _keep_failed(session, groups)
            for fb in fbs:  # the cause, where a forward-backward failed (its optim-step then failed unsent or unrun)
                if fb.done() and fb.status == wire.OperationStatus.FAILED:
                    try:
                        fb.result()
                    except OperationFailed as exc:
                        raise pieces.failed(fbs, exc, None) from None
            raise
        except KeyboardInterrupt:  # Ctrl-C while the step trains on: its completions are kept, under its step
            _keep_failed(session, groups, _made(opt))
            raise
        step = int(out.step)
        session.history.log_completions(step, completion_rows(groups))
        try:  # one failed here as it ran on ``rlnb serve``, its optim-step queued behind it (a local one: unrun)
            fb_out = pieces.joined([fb.result() for fb in fbs], tokens)
        except OperationFailed as exc:
            raise pieces.failed(fbs, exc, step) from None
        metrics = step_metrics(groups, fb_out.metrics)
        session.history.log(step, **metrics)
        return StepReport(
            step=step,
            reward=metrics[RLMetric.REWARD],
            loss=fb_out.loss,
            grad_norm=float((out.metrics or {}).get("grad_norm", float("nan"))),
            status=opt.status,
            rewards=[r.reward for g in groups for r in g],
            metrics=metrics,
        )


def check_temperature(temperature: Any) -> None:
    """``ValueError`` unless an RL step's sampling temperature is a finite number of at least
    ``wire.MIN_TEMPERATURE``: below it (0 included) sampling is greedy, a group's completions are one and the same, so
    are their rewards, and every step trained nothing (loss 0, gradient 0)."""
    t = temperature
    low = wire.MIN_TEMPERATURE
    if isinstance(t, bool) or not (isinstance(t, numbers.Real) and math.isfinite(t) and float(t) >= low):
        raise ValueError(
            f"temperature must be a finite number >= {low:g} (below it sampling is greedy: every completion of a "
            f"group is the same, equal rewards, advantages 0, nothing trained), got {t!r}"
        )


def check_loss(loss: str, loss_params: dict[str, Any] | None) -> None:
    """``ValueError`` before anything is sent when ``rl_step`` cannot train with this loss: bad params (named by
    ``wire.loss_config``), a loss that reads no advantages (``cross_entropy``), or a KL penalty, which needs
    reference log-probs that ``rl_step`` does not have."""
    config = wire.loss_config(loss, loss_params)
    spec = wire.LOSSES[config.type]
    if (
        "advantages" not in spec.required
    ):  # cross_entropy: every forward-backward would fail INVALID_INPUT after sampling
        policy = ", ".join(s.name for s in wire.LOSSES.values() if "advantages" in s.required)
        raise ValueError(
            f"loss {spec.name!r} is not a policy loss (it reads {', '.join(spec.required)}, not the "
            f"samples' advantages): rl_step trains with one of {policy}"
        )
    if wire.needs_reference(config):
        beta = config.grpo_params.beta if config.grpo_params is not None else None
        raise ValueError(
            f"loss_params beta = {beta} needs each sample's reference_logprobs, "
            "which rl_step does not compute: use beta = 0, or build samples.policy(..., reference_logprobs=...) "
            "and call forward_backward yourself"
        )


def _made(opt: Operation[wire.OptimStepResult] | None) -> int | None:
    """The step that ``opt`` (an optim-step sent, or None) made, where it has finished; else None (``_keep_failed``
    reads the session's step + 1)."""
    if opt is not None and opt.status == wire.OperationStatus.COMPLETED:
        return int(opt.result().step)
    return None


def _keep_failed(session: Session, groups: list[list[Rollout]], step: int | None = None) -> None:
    """The completions of a step whose reward or optim-step failed (or was interrupted), under the step it was to
    complete (``step``, when known). Every earlier operation has finished (the samples came after them), so that is
    the session's step + 1; a session that cannot say (a stopped one) keeps none, and the failure is raised all
    the same."""
    with contextlib.suppress(Exception):
        session.history.log_completions(session.step + 1 if step is None else step, completion_rows(groups))
