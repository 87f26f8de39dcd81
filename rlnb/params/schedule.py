"""Learning-rate schedules. Together's guide says to pass the learning rate on every optim-step, so
the caller owns the schedule: ``Schedule`` turns a base rate into the rate for step ``n``."""

from __future__ import annotations

import math
import numbers
import reprlib
from dataclasses import dataclass
from typing import Literal

from rlnb._input.checks import is_integer

ScheduleKind = Literal["constant", "linear", "cosine"]

MAX_STEPS = 1_000_003
"""The longest schedule (``total_steps``, and the warmup within it): the most steps one run takes,
``rlnb.tasks.MAX_STEPS`` (a layer above; a test keeps the two equal). A longer one would never reach its floor in
any run, and the builder would take ``10**300`` as valid and raise an ``OverflowError`` at ``10**400`` (its plot)."""


@dataclass(frozen=True)
class Schedule:
    """Warmup, then constant, linear or cosine decay to ``min_lr_ratio`` × the base rate.

    Steps count from 0 (the first optim-step of the run), as in nanoGPT's ``get_lr``.
    """

    kind: ScheduleKind = "constant"
    warmup_steps: int = 0
    total_steps: int = 100
    """Where linear/cosine decay reaches its floor (ignored by constant)."""
    min_lr_ratio: float = 0.1
    """The floor, as a fraction of the base rate: > 0, since every optim-step needs a positive rate."""

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "linear", "cosine"):
            raise ValueError(f"Schedule.kind must be 'constant', 'linear' or 'cosine', got {self.kind!r}")
        for name, low in (("warmup_steps", 0), ("total_steps", 1)):  # an int: NaN passes every comparison
            value = getattr(self, name)
            if not is_integer(value) or not low <= value <= MAX_STEPS:
                raise ValueError(f"Schedule.{name} = {reprlib.repr(value)} is invalid: must be an integer >= {low} "
                                 f"and <= {MAX_STEPS} (the most steps a run takes)")  # fmt: skip
            object.__setattr__(self, name, int(value))  # a numpy integer kept as one: JSON refuses it
        if self.warmup_steps > self.total_steps:  # the run would end before its warmup
            raise ValueError(
                f"Schedule.warmup_steps = {self.warmup_steps} is invalid: must be <= total_steps ({self.total_steps})"
            )
        ratio = self.min_lr_ratio  # the API needs learning_rate > 0 at every step; NaN fails the range too
        if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0 < float(ratio) <= 1:
            raise ValueError(f"Schedule.min_lr_ratio = {ratio!r} is invalid: must be a number in (0, 1]")
        object.__setattr__(self, "min_lr_ratio", float(ratio))  # np.float32(0.5) too, kept as a float

    def multiplier(self, step: int) -> float:
        """The factor applied to the base learning rate at ``step``."""
        if not is_integer(step) or step < 0:
            raise ValueError(f"step must be an integer >= 0 (steps count from 0, the first optim-step), got {step!r}")
        # 1) linear warmup from 1/warmup to 1
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        # 2) past the end: the floor
        if step >= self.total_steps:
            return self.min_lr_ratio
        # 3) in between: decay from 1 to the floor
        span = max(1, self.total_steps - self.warmup_steps)
        progress = (step - self.warmup_steps) / span
        shape = 1 - progress if self.kind == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * shape

    def past_end(self, step: int) -> str:
        """What optim-step ``step`` (from 0) gets past the end of a decaying schedule, in the words the run panel's
        warning and a sweep's share after its number from 1 (``step 31 is ``...): ``past the end of the cosine
        schedule (total steps 30): every step from here gets its floor, 0.1× the base rate``; "" before the end, and
        on a constant schedule, which has none."""
        if self.kind == "constant" or step < self.total_steps:
            return ""
        return (f"past the end of the {self.kind} schedule (total steps {self.total_steps}): every step from here "
                f"gets its floor, {rate(self.min_lr_ratio)}× the base rate")  # fmt: skip

    def misfit(self, steps: int) -> str:
        """Why a run of ``steps`` steps does not fit this decaying schedule, or "" when it ends at its end (or the
        schedule is constant): its steps past the end get the floor (``past_end``), or it ends before the floor.
        Its steps are numbered from 1, as ``history.steps`` and the run panel number them (optim-step ``n - 1``)."""
        if self.kind == "constant" or steps == self.total_steps:
            return ""
        if steps > self.total_steps:
            return f"step {self.total_steps + 1} of {steps} is {self.past_end(self.total_steps)}"
        return (f"step {steps}, the last of {steps}, comes before the end of the {self.kind} schedule (total "
                f"steps {self.total_steps}): it gets {self.multiplier(steps - 1):.2g}× the base rate, not the floor "
                f"{rate(self.min_lr_ratio)}×")  # fmt: skip

    def __call__(self, step: int, base_lr: float) -> float:
        """The rate for ``step``; ``base_lr`` a finite number >= 0 (NaN, -1 and True would give a rate no step can
        use, "1e-3" Python's "can't multiply sequence"; 0 is the widgets' "no rate yet", drawn as 0)."""
        if isinstance(base_lr, bool) or not isinstance(base_lr, numbers.Real) or not 0 <= float(base_lr) < math.inf:
            raise ValueError(f"base_lr = {base_lr!r} is invalid: must be a finite number >= 0")
        return float(base_lr) * self.multiplier(step)


def rate(value: float) -> str:
    """A learning rate (or a factor of one) as sent, in the fewest digits that read back as it (Python's repr):
    ``0.05``, ``0.00125``, ``100``, ``1e-9``. Two significant figures showed 0.00125 as 0.0013 and 100 as 1e+2, a
    rate not sent."""
    text = repr(float(value)).removesuffix(".0")
    return text.replace("e-0", "e-").replace("e+0", "e+")
