"""A range test's steps (``measure``): one per rate, each logged, until the last rate, ``stop``, a divergence, an
error or a Ctrl-C; then the copy's last operations waited for and the copy closed. Whatever ended them, the steps
measured are the result, kept with what ended them (``Measured``), which ``find`` judges."""

from __future__ import annotations

import math
import reprlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlnb import wire
from rlnb.errors import InvalidParams, OperationFailed, OperationTimeout, RlnbError, describe
from rlnb.params import DECAY_RULE, OptimizerParams
from rlnb.session import Session

from ..options import StepFn
from ..trial import Objective
from .curve import Diverging
from .rates import with_lr

LOGGED: dict[str, str] = {"reward": "reward", "loss": "lr_find_loss"}
"""The name each objective is logged under (``loss`` is a column of the steps table already)."""


@dataclass
class Measured:
    """The steps of a range test and what ended them."""

    values: list[float] = field(default_factory=list)
    ended: str = ""
    """Why the test ended before its last rate, in words; "" where it ran to the end."""
    cut_short: bool = False
    """Stopped short of end_lr by the user or an error, not by the curve (a divergence, the decay)."""
    interrupted: bool = False
    """A Ctrl-C, wherever it landed (a step, the log, ``progress``, the final wait, the close)."""
    failure: Exception | None = None
    """The error of the user's step_fn or progress (or of a rate refused): raised with the result."""
    late: str = ""
    """What went wrong after the steps: the wait for the copy's last operations, its close."""


def measure(
    trial: Session,
    run: StepFn,
    base: OptimizerParams,
    lrs: list[float],
    objective: Objective,
    logged: str | None,
    stop: threading.Event | None,
    progress: Callable[[int, int], None] | None,
    wait: float,
    checked: bool = False,
) -> Measured:
    """``run(trial, base at lrs[i], i)`` for each rate, its value logged as ``logged`` (None: the step logs it), with
    ``progress(done, len(lrs))`` after each; then the trial's operations waited for (``wait`` seconds at most) and the
    trial closed, whatever ended the steps. ``checked``: each rate is first checked against the session's weights'
    limits (``check_params``, as ``rl_step`` does), so the range ends at the first one refused, nothing sent."""
    got, hung, diverging = Measured(), False, Diverging(objective)
    try:
        for i, lr in enumerate(lrs):
            if stop is not None and stop.is_set():
                got.ended, got.cut_short = f"stopped after {i} steps", True
                break
            try:
                at_lr = with_lr(base, lr)
                if checked:  # rl_step's check first: the session's weights' limits (a step past float32)
                    trial.check_params(at_lr)
            except InvalidParams as exc:  # past it, base's decay would erase the weights: the range ends here
                if i == 0 or not any(DECAY_RULE in rule for *_, rule in exc.errors):
                    raise
                got.ended = f"stopped at lr {lr:.3g}: {exc}"
                break
            except ValueError as exc:  # as the decay's: the range ends at the first rate refused, nothing sent
                if i == 0:
                    raise
                got.ended = f"stopped at lr {lr:.3g}: {exc}"
                break
            try:
                value = _number(run(trial, at_lr, i), i, lr)
            except OperationFailed as exc:
                got.ended = f"{wire.short_name(exc.code or wire.OperationStatus.FAILED.name)} at lr {lr:.3g}"
                break
            except InvalidParams:
                raise
            except RlnbError as exc:  # the session closed, timed out, or the service failed: the steps measured stand
                got.ended, got.cut_short = f"{type(exc).__name__} at lr {lr:.3g}: {exc}", True
                hung = isinstance(exc, OperationTimeout)  # no wait for what timed out: the close stops it
                break
            got.values.append(value)
            trial.history.log(trial.step, **({logged: value} if logged else {}), lr_find_lr=lr)
            if progress is not None:
                progress(i + 1, len(lrs))
            if not math.isfinite(value) and i == 0:  # measured before any rate had moved the weights
                got.ended = (f"the {objective} was {value} at the first step, before any rate had acted: the model "
                             "or the objective is broken from the start, not diverged by a rate")  # fmt: skip
                break
            if not math.isfinite(value):
                got.ended = f"diverged at lr {lr:.3g} ({objective} {value})"
                break
            if diverging(value):
                got.ended = f"diverged at lr {lr:.3g}"
                break
    except KeyboardInterrupt:  # Ctrl-C, as ``stop``, in a step, the log or ``progress``: the steps measured stand
        got.ended, got.interrupted, got.cut_short = f"interrupted after {len(got.values)} steps", True, True
    except Exception as exc:  # the user's step_fn or progress (or a rate refused): raised by lr_find, with the result
        got.ended, got.failure, got.cut_short = f"{type(exc).__name__} after {len(got.values)} steps: {exc}", exc, True
    finally:
        _close(trial, got, wait, hung)
    return got


def _close(trial: Session, got: Measured, wait: float, hung: bool) -> None:
    """Wait for the trial's last operations (not where one hung: the close stops it), then close it, each Ctrl-C,
    timeout or failed close (the server gone) said in ``got.late``: the result is kept."""
    try:
        if not hung:
            trial.wait(wait)
    except KeyboardInterrupt:
        got.late, got.interrupted = "; interrupted in the wait for the copy's last operations", True
    except OperationTimeout as exc:  # a hung step: the close stops it
        got.late = f"; not waited for: {exc} (lr_find waits as long as an operation may take)"
    finally:  # a second Ctrl-C in the wait, or its error, left the copy open (remote: a paid session running)
        try:
            trial.close()
        except KeyboardInterrupt:  # as it stands after a Ctrl-C that propagated, but the result is kept
            got.late, got.interrupted = f"{got.late}; interrupted while the copy closed: it may still be open", True
        except Exception as exc:  # noqa: BLE001 - the server gone: its notes name what may still run; the steps stand
            got.late = f"{got.late}; the copy's close failed: {describe(exc)}"


def _number(raw: Any, i: int, lr: float) -> float:
    """A step's objective as a float; anything else (None from a ``step_fn`` without ``return``, a dict of
    metrics, a flag) is a ``TypeError`` naming ``step_fn``, not float()'s "must be a string or a real number"."""
    try:
        if isinstance(raw, bool | str | bytes):
            raise TypeError
        return float(raw)
    except (TypeError, ValueError, OverflowError, RuntimeError):  # 10**400; a tensor of many elements
        raise TypeError(f"step_fn returned {reprlib.repr(raw)} at step {i} (lr {lr:.3g}): it must return the "
                        "objective, a number a float holds") from None  # fmt: skip
