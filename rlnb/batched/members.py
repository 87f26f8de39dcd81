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
from rlnb.wire import OptimizerKind


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

    status: str
    reason: str | None
    rewards: list[float]
    losses: list[float]
    history: History
    wall_s: float
    weights: dict[str, Tensor] | None = None
    """With ``keep_weights``: its weights when it ended (a failed step left them untouched)."""

    @property
    def steps_done(self) -> int:
        return len(self.rewards)


@dataclass
class Hooks:
    """How the caller follows and ends an ensemble: ``stop`` ends it before the next step, ``on_step`` follows
    each completed step of a member (``OnStep``) and ``on_done(i, result)`` each member's end."""

    stop: threading.Event = field(default_factory=threading.Event)
    on_step: OnStep | None = None
    on_done: Callable[[int, MemberResult], None] | None = None


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
