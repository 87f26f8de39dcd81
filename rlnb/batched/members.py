"""What a batched trial is and how it ended: ``Member`` (params, seed, run id) and ``MemberResult``.

A member of an ensemble (``rlnb.batched``) is one trial: the same RL steps as ``rlnb.tasks.rl_step`` on a
local session seeded with ``seed``, sampling with seed ``seed * SEED_STRIDE + step`` as the sweep does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from rlnb.history import History
from rlnb.params import PARAMS, OptimizerParams
from rlnb.tasks import StepReport
from rlnb.wire import OptimizerKind, TrialStatus


@dataclass
class Member:
    """One trial of an ensemble: its optimizer params (or ``params(step)``, e.g. for a schedule), its seed
    (the model's initial weights, and sampling), its run id, and fields for its run's ``config.json``."""

    params: OptimizerParams | Callable[[int], OptimizerParams]
    seed: int = 0
    run_id: str | None = None
    annotations: dict[str, Any] = field(default_factory=dict)


OnStep = Callable[[int, StepReport], "str | None"]
"""``on_step(member, report)`` after each completed step of a member; a string answer prunes that member
(it ends PRUNED with that reason, unless that was its last step), as a sweep's pruner answers a trial."""


@dataclass
class MemberResult:
    """How a member ended: ``status`` COMPLETED / FAILED / PRUNED / STOPPED and ``reason`` (as a sweep's row
    says them), each completed step's mean reward and forward-backward loss (``rl_step``'s report), its
    History, and the ensemble's wall time until then."""

    status: TrialStatus
    reason: str | None
    rewards: list[float]
    losses: list[float]
    history: History
    wall_s: float
    weights: dict[str, Tensor] | None = None
    """With ``keep_weights``: its weights when it ended (a failed step left them untouched, but for one that stopped
    part way: its reason says "half-stepped", and they are then neither its last step's nor the next's)."""
    built: bool = True
    """False for a member whose model the memory no longer held as the ensemble was built (FAILED
    ``RESOURCE_EXHAUSTED``): it never trained and made no run folder, so it can run again, with its run id, in a
    later ensemble (a sweep does so)."""

    @property
    def steps_done(self) -> int:
        return len(self.rewards)


class CallbackFailed(Exception):
    """The caller's ``on_step`` / ``on_done`` raised (``error``): that is the caller's error, not the members'."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class Hooks:
    """How the caller follows and ends an ensemble: ``stop`` ends it before the next step, ``on_step`` follows
    each completed step of a member (``OnStep``) and ``on_done(i, result)`` each member's end."""

    stop: threading.Event = field(default_factory=threading.Event)
    on_step: OnStep | None = None
    on_done: Callable[[int, MemberResult], None] | None = None

    def step(self, i: int, report: StepReport) -> str | None:
        """``on_step``'s answer for member ``i``: None (go on) or a reason to prune it. ``CallbackFailed`` where it
        raises, or answers neither (False pruned the member, with the reason 'False')."""
        verdict = _call(self.on_step, i, report)
        if verdict is not None and not isinstance(verdict, str):
            why = f"on_step returned {verdict!r} for member {i}: return None to go on, or a reason (a str) to prune it"
            raise CallbackFailed(TypeError(why))
        return verdict

    def done(self, i: int, result: MemberResult) -> None:
        """Tell ``on_done`` that member ``i`` ended; ``CallbackFailed`` where it raises."""
        _call(self.on_done, i, result)


def _call(callback: Callable[..., Any] | None, *args: Any) -> Any:
    try:
        return callback(*args) if callback is not None else None
    except Exception as exc:
        raise CallbackFailed(exc) from exc


def params_at(member: Member, i: int, kind: OptimizerKind) -> OptimizerParams:
    """``member``'s params at step ``i``, or a ``TypeError`` naming what its function returned unless they are
    ``kind``'s (a session's "this session's optimizer" named no member, nor its params)."""
    value = member.params(i) if callable(member.params) else member.params
    expected = PARAMS[kind]
    if not isinstance(value, expected):
        raise TypeError(
            f"params({i}) returned {type(value).__name__}: optimizer={kind!r} takes {expected.__name__}, "
            f"not {type(value).__name__}"
        )
    return value
