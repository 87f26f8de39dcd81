"""Find LR on a RunPanel given ``step_fn``: the range test runs the panel's own step, not the first_letter task it
probed before (a suggestion for another training).

``lr_find`` wants ``step_fn(session, params, i)`` returning one number. A panel's ``step_fn(session, params)``
returns figures to log (or None), and its loss is no figure of them (``loss`` is a column of the steps table: the sum
of the step's forward-backwards' losses, which the panel's view draws). So a range test follows the ``reward`` the
step function returns when it returns one (maximised), else its step's loss from the copy's steps table
(minimised); ``lr_finder.options["objective"]`` chooses. One with neither (no reward, no training forward-backward)
cannot be probed: the click is refused, saying why and how."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any, get_args

from rlnb.params import OptimizerParams
from rlnb.session import Session
from rlnb.sweep.lr.find import wait_deadline
from rlnb.sweep.trial import Objective
from rlnb.widgets.steps import figures

GUESSED = ("a guess: the panel has not stepped, so what your step_fn returns is not known yet; its first step here "
           "checks, and one that returns a 'reward' ends the test")  # fmt: skip
"""Said, before the range test's first step, of a panel's step_fn followed by its loss only because the panel never
stepped: "range test of your step_fn's loss running" would say as known what is a guess, and one returning a reward
then fails the test."""

REWARD, LOSS = get_args(Objective)  # maximised, minimised

RECIPE = (
    "to probe your own loop, set builder.lr_finder.options['step_fn'] to a function step_fn(session, params, i) "
    "returning the number to follow, and options['objective'] to 'reward' or 'loss'"
)
NOTHING = "returns no 'reward' figure and its step has no loss (no training forward-backward)"


def step_loss(session: Session) -> float:
    """The loss of the session's last completed step (the sum of its forward-backwards'), NaN when it had none."""
    steps = session.history.steps
    return float(steps.loss.iloc[-1]) if len(steps) else math.nan


def objective_of(session: Session, seen: Collection[str] | None, given: Any) -> tuple[str, bool]:
    """What the range test follows, and whether that is known (not only guessed before any step): ``given``
    (``options["objective"]``), else ``reward`` if the panel's last step returned one (``seen``: the names its
    figures had; None before a step), else ``loss``. ``ValueError`` saying why and how when the last step
    returned no reward and had no loss."""
    if given is not None:
        return str(given), True  # lr_find checks it is an Objective
    if seen is None:
        return LOSS, False
    if REWARD in seen:
        return REWARD, True
    if math.isnan(step_loss(session)):
        raise ValueError(f"Find LR cannot probe your step_fn: its last step {NOTHING}, nothing for a range test to "
                         f"minimise or maximise; {RECIPE}")  # fmt: skip
    return LOSS, True


class OwnStep:
    """A panel's ``step_fn(session, params)`` as ``lr_find``'s ``step_fn(session, params, i)``, on the copy of the
    session that ``lr_find`` passes: the ``reward`` it returns, or its step's loss. At the first step, a loss followed
    while unknown (the panel never stepped) is checked: a step with no loss, or one returning a reward, ends the test
    with a ``TypeError`` saying why and how."""

    def __init__(self, step_fn: Callable[[Session, OptimizerParams], Any], objective: str, known: bool):
        self.step_fn, self.objective, self.known = step_fn, objective, known

    def __call__(self, session: Session, params: OptimizerParams, i: int) -> Any:
        returned = figures(self.step_fn(session, params)) or {}
        if self.objective == REWARD:
            if REWARD not in returned:
                raise TypeError(f"your step_fn returned {returned!r} at step {i} of the range test: Find LR follows "
                                f"its 'reward' figure; {RECIPE}")  # fmt: skip
            return returned[REWARD]
        session.wait(wait_deadline(session))  # its optim-step done: its row of the steps table is there
        loss = step_loss(session)
        if i == 0 and not self.known and REWARD in returned:
            raise TypeError("your step_fn returns a 'reward': click Step once so that Find LR follows it, or set "
                            "builder.lr_finder.options['objective'] = 'reward' (it followed the loss)")  # fmt: skip
        if i == 0 and math.isnan(loss):  # later, a NaN loss is a diverged step: lr_find ends there, saying so
            raise TypeError(f"Find LR cannot probe your step_fn: it {NOTHING}; {RECIPE}")
        return loss
