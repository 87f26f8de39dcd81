"""How a member of an ensemble fails at a step, alone, recorded as the same trial on a session records it.

A member fails at a step, and leaves the ensemble before the update (so the failed step changes nothing of it):

* its step's params cannot be made (its params function raised, or returned the other optimizer's), or the
  weights refuse them (eps 0 in their dtype, a step size past it): FAILED before sampling (``step_params``), with
  nothing of that step recorded, as ``rl_step`` refuses them alone (``Session.check_params``: ``ValueError``);
* sampled log-probs not finite: the sample FAILED NON_FINITE_LOSS, as the sample handler fails it;
* the reward raised, or the advantages are not finite (``rlnb.tasks.score`` refuses them): the sample is
  recorded COMPLETED, then FAILED with nothing more (these two: ``rlnb.batched.sampler``);
* forward-backward fails (INVALID_INPUT, NON_FINITE_LOSS: no gradients): its optim-step and weights-sync fail
  unrun with its code, as the engine's worker fails the rest of an ``rl_step`` (``rlnb._one_step``); no step is
  counted; the trial is FAILED with the forward-backward's error;
* a non-finite gradient norm: optim-step FAILED NON_FINITE_LOSS (nothing changed), weights-sync fails unrun with
  it; the trial is FAILED with that error.

The last two are ``fail_optim_step``.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from rlnb import wire
from rlnb._one_step import rest_failed
from rlnb.batched.members import Member, params_at
from rlnb.batched.reasons import failure_reason
from rlnb.batched.recorder import Op, Recorder
from rlnb.engine.optim.failures import NonFiniteGradient
from rlnb.errors import describe
from rlnb.params import Hyperparams, OptimizerParams
from rlnb.tasks.rollouts import Rollout, completion_rows
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire import OptimizerKind


def own_errors() -> tuple[type[BaseException], ...]:
    """What a member's own code (its reward, its params function) may raise and fail that member alone. A Ctrl-C
    reaches only the main thread: there a ``KeyboardInterrupt`` is the user's and stops the ensemble; on another
    thread (a sweep's ensembles run on one) anything is that code's own, as a sweep's threads take it
    (``KeyboardInterrupt``, ``SystemExit`` or a ``BaseException`` of its own would fail every member of the group)."""
    if threading.current_thread() is threading.main_thread():
        return (Exception,)
    return (BaseException,)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """A Ctrl-C (SIGINT) that arrives inside the block is raised as ``KeyboardInterrupt`` once it has run: the
    members' update and its records are one step, whole or not at all (one raised inside it left a member trained
    with its step half recorded, its reward and completions lost). Only on the main thread under Python's own
    handler: no Ctrl-C reaches another thread, and another handler is its owner's to keep."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:  # the block ran whole: the interrupt stops the run now
        raise KeyboardInterrupt


@dataclass
class StepParams:
    """The members' params at a step: ``sent`` (what each optim-step sends) and ``failed`` (why the others send
    none: their trial's reason)."""

    sent: dict[int, OptimizerParams] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)


def step_params(
    members: Mapping[int, Member], i: int, kind: OptimizerKind, refusal: Callable[[Hyperparams], str | None]
) -> StepParams:
    """Each of ``members``' params at step ``i``; a member whose params raise (InvalidParams, a schedule's bug) fails,
    and so does one whose params ``refusal`` refuses (``StackedOptimizer.refusal``: the weights cannot take them),
    before its step is sampled, as ``rl_step`` refuses them alone (``Session.check_params``: ``ValueError``)."""
    out = StepParams()
    for m, member in members.items():
        try:
            value = params_at(member, i, kind)
            hp = value.resolved()
        except own_errors() as exc:  # the member's own code: its trial fails, not the ensemble
            out.failed[m] = describe(exc)  # an exception whose str() raises is named by its type
            continue
        if (why := refusal(hp)) is not None:
            out.failed[m] = describe(ValueError(why))
            continue
        out.sent[m] = value
    return out


def fail_optim_step(
    rec: Recorder,
    ops: tuple[Op, Op],
    groups: Sequence[Sequence[Rollout]],
    hp: Hyperparams,
    fb_error: tuple[Code, str] | None,
    grad_norm: float,
    non_finite: list[str],
) -> str | None:
    """The member's trial's reason if it cannot train on this step (a ``fb_error``, a
    non-finite ``grad_norm``, the ``non_finite`` weights named as a session's step names them), with its optim-step
    and weights-sync (``ops``) and the step's completions (``groups``) recorded as a session records them; None
    (nothing recorded) if it can."""
    opt, sync = ops
    first = wire.OperationKind.OPTIM_STEP  # the step's operation that failed: the rest is not run (_one_step)
    if fb_error is not None:  # no gradients: the step's optim-step is not run (nor are its params checked)
        (code, said), first = fb_error, wire.OperationKind.FORWARD_BACKWARD
        rec.fail(opt, code, rest_failed(first, said, sent=True))
    elif not math.isfinite(grad_norm):
        unclipped = not non_finite and not hp.grad_clip_norm > 0  # as a session's step says it
        code, said = Code.NON_FINITE_LOSS, NonFiniteGradient(grad_norm, non_finite, unclipped=unclipped).dropped()
        rec.fail(opt, code, said)
    else:
        return None
    rec.history.log_completions(rec.step + 1, completion_rows(groups))  # as rl_step keeps them
    rec.fail(sync, code, rest_failed(first, said, sent=True))
    return failure_reason(code, said)
