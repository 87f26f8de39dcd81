"""The steps table's columns, its row as a live view reads it (``StepRow``), and the figures ``History.log``
records beside them: a ``log()`` row is checked here, before anything is kept, so that every figure is a real
number at an integer step and none takes a column's name. The names of the figures rlnb logs itself (``RLMetric``,
``EVAL_ACCURACY``) are here too, for the RL step that logs them and the plots and tables that show them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from rlnb._input.checks import is_integer
from rlnb._input.scalars import scalar
from rlnb.history.record import FLOAT_MAX
from rlnb.text.prompts import check_text

ROW_FLOATS = ("grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate")
"""Figures of a completed optim-step, copied into its row."""
STEP_COLUMNS = ("step", "loss", *ROW_FLOATS, "step_time_s", "queue_s", "weights_version")
"""The steps table's own columns: a logged figure may not take one of these names."""
SHADOWED = "{} (logged)"
"""The column of a logged figure named like one of ``STEP_COLUMNS`` in a run written before ``log`` refused it."""
SESSION_FIELD = "rlnb_session"
"""A ``metrics.jsonl`` line's field beside its figures: the session of the run that logged it (0 for the first), so
that a row read back joins that session's point of its step only, not each session's of a run continued from step 0.
A figure may not take its name."""


class RLMetric:
    """The names of the RL metrics ``rlnb.tasks.rl_step`` logs per step, TRL ``GRPOTrainer``'s. Plain strings, not
    an enum: they are the keys of a logged row and of ``StepReport.metrics``, as a user's own figures are."""

    REWARD: Final = "reward"
    REWARD_STD: Final = "reward_std"
    ZERO_STD: Final = "frac_reward_zero_std"
    MEAN_LENGTH: Final = "completions/mean_length"
    MIN_LENGTH: Final = "completions/min_length"
    MAX_LENGTH: Final = "completions/max_length"
    CLIPPED: Final = "completions/clipped_ratio"
    """The fraction of completions cut at ``max_tokens``."""
    DISTINCT: Final = "completions/distinct_mean"
    """rlnb's own: the distinct completions per group, a mean over groups (a collapsed policy gives 1)."""
    ENTROPY: Final = "entropy"
    KL: Final = "kl"
    CLIP_LOW: Final = "clip_ratio/low_mean"
    CLIP_HIGH: Final = "clip_ratio/high_mean"
    CLIP_REGION: Final = "clip_ratio/region_mean"


RL_METRICS: tuple[str, ...] = tuple(v for k, v in vars(RLMetric).items() if k.isupper())
"""``RLMetric``'s names in the order ``step_metrics`` logs them (the last five only when the forward-backward reports
them)."""
EVAL_ACCURACY: Final = "eval/accuracy"
"""The history's name for held-out accuracy (``History.log(step, **{EVAL_ACCURACY: ...})``)."""
MAX_STEP = 2**63 - 1
"""The largest step a table column (int64) holds."""
MAX_NAME = 250
"""The longest figure name ``History.log`` takes (characters): MLflow's longest metric key, so the MLflow sink keeps a
name as written; past it, drawing the name in a plot's title and label took seconds (10 s at 30,000 characters)."""
NO_STEP: Any = object()
"""``History.log``'s step when given by name (``log(step=3, ...)``)."""


@dataclass(slots=True)
class StepRow:
    """One completed optimizer step. ``loss`` is the sum over its forward-backwards so far; ``run_s`` its
    compute time and ``queue_s`` its wait (``rlnb.history.timing``), over its operations finished so far."""

    seq: int
    step: int
    grad_norm: float
    grad_norm_muon: float
    grad_norm_adam: float
    grad_clip_norm: float
    learning_rate: float
    finished_at: float
    loss: float = math.nan
    run_s: float = math.nan
    queue_s: float = math.nan


def checked_step(where: str, step: Any) -> int:
    """``step`` as a plain int, or ``ValueError`` unless it is an integer in [0, 2**63): a Python, numpy or torch one
    (a one-element tensor of an integer dtype), never a bool. ``hasattr(step, "__index__")`` let float tensors and
    arrays through, and ``int()`` cut them: ``torch.tensor(1.7)`` was recorded at step 1, ``tensor(True)`` at 1."""
    value = scalar(step)
    if not is_integer(value) or not 0 <= value <= MAX_STEP:
        raise ValueError(f"{where}: step must be an integer >= 0 and < 2**63, got {step!r}"[:300])
    return int(value)


def logged_figures(step: Any, figures: dict[str, Any]) -> dict[str, Any]:
    """The row ``History.log(step, **figures)`` records, or ``ValueError`` naming what cannot be one: a step
    that is not an integer in [0, 2**63), a figure that is not a real number, one with an empty name or a name that is
    not valid Unicode (a lone surrogate: no table column holds it), one past ``MAX_NAME`` characters, or one named like
    a steps column or ``SESSION_FIELD``."""
    if step is NO_STEP:  # History.log(step=3, ...)
        step = figures.pop("step", None)  # History.log's own **figures
    elif "step" in figures:  # History.log(1, step=...): not Python's "multiple values for argument 'step'"
        raise ValueError(f"history.log: 'step' is a column of the steps table ({', '.join(STEP_COLUMNS)}); log "
                         "it under another name (e.g. 'my_step')")  # fmt: skip
    row: dict[str, Any] = {"step": checked_step("history.log", step)}
    for name, value in figures.items():
        if not name.strip():  # a column named "" (or " "): no plot or table can name it back
            raise ValueError(f"history.log: a figure needs a name, got {name!r}")
        if len(name) > MAX_NAME:  # before check_text, whose message would hold the whole name
            raise ValueError(f"history.log: a figure name of {len(name)} characters ({name[:20]!r}...): at most "
                             f"{MAX_NAME}")  # fmt: skip
        check_text(name, f"history.log: the figure name {name!r}")
        if name == SESSION_FIELD:
            raise ValueError(f"history.log: {name!r} is the run folder's own field (the session that logged the row); "
                             "log it under another name")  # fmt: skip
        if name in STEP_COLUMNS:
            raise ValueError(
                f"history.log: {name!r} is a column of the steps table ({', '.join(STEP_COLUMNS)}); log it under "
                f"another name (e.g. 'my_{name}')"
            )
        row[name] = _figure(name, value)
    return row


def _figure(name: str, value: Any) -> float:
    """A logged figure as the float it is, or ``ValueError`` naming it: no real number, or a finite one past the
    largest float. ``float()`` raised for the int ``10**400`` and gave inf for ``np.longdouble("1e4000")`` or
    ``Decimal("1e400")``, which were logged as infinite; infinity itself (``math.inf``, numpy's) is a figure."""
    try:
        if isinstance(value, bool | str | bytes | complex) or _bool_or_complex(getattr(value, "dtype", None)):
            raise TypeError  # float() would take numpy's and torch's (as 1.0, or the real part)
        number = float(value)
        if math.isinf(number) and not bool(value == number):  # finite, and past the largest float
            raise OverflowError
    except OverflowError:
        raise ValueError(f"history.log: {name} must be a real number a float holds (at most {FLOAT_MAX:.1e} in "
                         f"size; math.inf for an infinite one), got {value!r}"[:300]) from None  # fmt: skip
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: torch's
        raise ValueError(f"history.log: {name} must be a real number, got {value!r}"[:300]) from None
    return number


def _bool_or_complex(dtype: Any) -> bool:
    """Whether a numpy or torch dtype is a bool or a complex one."""
    if getattr(dtype, "kind", "") in ("b", "c"):  # numpy's
        return True
    return bool(getattr(dtype, "is_complex", False)) or str(dtype) == "torch.bool"


def stored(row: dict[str, Any], session: int | None) -> dict[str, Any]:
    """A ``log()`` row as its ``metrics.jsonl`` line holds it: with the session that logged it, where one is known."""
    return row if session is None else {**row, SESSION_FIELD: session}
