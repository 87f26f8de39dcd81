"""Figure of a search: what each trial reached against the hyperparameter it tried, pruned trials at the
value they had when stopped."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from rlnb.viz import insidelegend, placing
from rlnb.viz.draw import within_span
from rlnb.viz.plots import NotebookFigure
from rlnb.viz.texts import as_written, fit_titles
from rlnb.wire import TrialStatus

from .keys import can_hash, hashable
from .trial import BEST_IS_HIGHEST, LOSS_COLUMNS, LOSS_IS_NOISE, RESULT_COLUMNS, REWARD_WINDOW

LR = "learning_rate"
EMPTY = "no finished trials yet"
"""``search_plot``'s title while no trial has a value to draw."""
MARKERS: dict[str, tuple[str, str]] = {
    TrialStatus.COMPLETED: ("o", "C0"),
    TrialStatus.PRUNED: ("x", "C3"),
    TrialStatus.FAILED: ("s", "0.3"),
    TrialStatus.STOPPED: ("^", "0.6"),
}


def _axes(ax: Axes | None) -> Axes:
    """``ax``, or new axes."""
    check_axes(ax)
    return ax if ax is not None else NotebookFigure(figsize=(5, 3), layout="constrained").add_subplot()


def check_axes(ax: object) -> None:
    """``TypeError`` unless ``ax`` is matplotlib ``Axes`` or None: anything else (``ax=5``, a Figure) was an
    ``AttributeError`` from the first draw (``search_plot``, ``LRFind.plot``)."""
    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes (such as fig.add_subplot()) or None, got {ax!r}"[:300])


def search_plot(trials: pd.DataFrame, x: str | None = None, y: str = "value", ax: Axes | None = None) -> Axes:
    """``y`` (default: the objective, the mean of the last 5 steps, or of fewer where the trials ran fewer) against
    ``x`` per trial, one marker per status; ``x`` by default the learning rate, else (a space without it) the first
    numeric parameter searched, named in the title (not a ``ValueError`` saying ``learning_rate`` is not a column);
    the best completed trial (the highest reward, the lowest loss or ``wall_s``, ``value`` as the objective says; no
    star for a ``y`` with no better end, such as ``steps_done``) is starred and named in the legend (``_best``: with
    several seeds per config, the config with the best mean); a trial whose loss went NaN / inf (``diverged_at``) is
    ringed in red and never starred, nor is its config (nor, for its best mean, one with a FAILED trial). Where no
    trial has a ``y``, titled how they ended ("no trial has a value: 4 failed"), or "no finished trials yet" where
    every one was stopped: a sweep stopped before its trials started draws them by status; an Optuna search stopped
    before its first trial (a table with no rows, nor the columns of its space) draws empty axes, not an error
    naming a column it has no row to hold. On a figure of its own the legend is right of the axes, the figure
    widened for it; on ``ax`` given, inside them (the user's figure is not resized), fitted to them as drawn where
    it is wide or tall for them (``insidelegend``: a smaller font, columns, names cut)."""
    ylabel = f"{trials.attrs.get('objective', 'reward')} ({_window(trials, y)})" if y == "value" else y
    if trials.empty:
        ax = _axes(ax)
        ax.set(title=EMPTY, xlabel=x or LR, ylabel=ylabel)
        return ax
    check_trials(trials, "search_plot")
    chosen, x = x is None, x or searched(trials)
    check_column(trials, "x", x)
    check_column(trials, "y", y, numeric=True)  # text drew as categories, and the star went to the last in order
    _check_x(trials, x)
    own = ax is None
    ax = _axes(ax)
    for status, group in trials.groupby("status", sort=False):
        marker, color = MARKERS.get(str(status), ("o", "C1"))
        label = f"{str(status).lower()} ({len(group)})"
        ax.scatter(group[x], group[y], marker=marker, color=color, label=label, zorder=2)
    diverged = trials["diverged_at"].notna() if "diverged_at" in trials else pd.Series(False, index=trials.index)
    if diverged.any():  # its reward may be finite, even the best: ringed, and never starred
        ax.scatter(trials[x][diverged], trials[y][diverged], marker="o", s=120, facecolor="none", edgecolor="C3",
                   zorder=3, label=f"diverged ({int(diverged.sum())})")  # fmt: skip
    # by position: two sweeps' tables concatenated share index labels, and .loc gave rows, not a row
    done = trials[(trials.status == TrialStatus.COMPLETED) & trials[y].notna() & ~diverged].reset_index(drop=True)
    star, maximise = [], _maximise(trials, y)
    if len(done) and maximise is not None:
        at_x, at_y, label = _best(trials, done, x, y, maximise)
        star.append(ax.scatter([at_x], [at_y], marker="*", s=220, color="gold", edgecolor="k", zorder=3, label=label))
    logs = (LR, "adam.learning_rate", "eps", "weight_decay")
    # nothing drawn (no trial has a y): axes of (-0.055, 0.055) that a log scale refused when drawn
    if x in logs and is_numeric_dtype(trials[x]) and (trials[x] > 0).all() and trials[y].notna().any():
        ax.set_xscale("log")
    ax.set(xlabel=x, ylabel=ylabel)
    if trials[y].isna().all():
        ax.set_title(_none_drawn(trials, y))
    elif y in LOSS_COLUMNS:  # drawn, not ranked
        ax.set_title(f"no best {y} starred: {LOSS_IS_NOISE.partition(' (')[0]}", fontsize="medium")
    elif chosen and x != LR:
        ax.set_title(f"against {x}, the first numeric parameter searched (no {LR})", fontsize="medium")
    within_span(ax)  # a y near 1.7e308 failed when drawn (the tick locator's arange), as plots.metric did
    handles, labels = ax.get_legend_handles_labels()
    if own:  # inside, in a 5 × 3 in figure, every place covered trials, and "best" covered the star
        placing.beside(ax, handles, labels, grow=True)
    else:  # the user's figure is not resized: right of their axes it would run off it ("best" covered the star)
        insidelegend.legend(ax, handles, labels, clear=star)
        fit_titles(ax)  # on a grid's panel a column's long name ran across its row, the y label into the row above
    as_written(ax)  # a variant's or a column's name is the user's text, not TeX ("cost $5 and $6")
    return ax


def _none_drawn(trials: pd.DataFrame, y: str) -> str:
    """The title where no trial has a ``y``: ``EMPTY`` while every trial is STOPPED (a resume runs them), else how
    they ended ("no trial has a value: 4 failed"); "yet" told the person to wait for failed trials."""
    ended = trials["status"].value_counts(sort=False)
    if set(ended.index) <= {TrialStatus.STOPPED}:
        return EMPTY
    return f"no trial has a {y}: " + ", ".join(f"{n} {str(status).lower()}" for status, n in ended.items())


def _window(trials: pd.DataFrame, y: str) -> str:
    """Over how many steps ``value`` is a mean: ``REWARD_WINDOW``, or fewer where the trials ran fewer (the most any
    trial with a value ran, from ``steps_done``)."""
    if "steps_done" not in trials or y not in trials:
        return f"mean of the last {REWARD_WINDOW} steps"
    ran = pd.to_numeric(trials.loc[trials[y].notna(), "steps_done"], errors="coerce")  # an edited table: text
    ran = ran[(ran >= 1) & (ran < math.inf)]
    steps = min(REWARD_WINDOW, int(ran.max())) if len(ran) else REWARD_WINDOW
    return "the last step" if steps == 1 else f"mean of the last {steps} steps"


def _best(trials: pd.DataFrame, done: pd.DataFrame, x: str, y: str, maximise: bool) -> tuple[Any, float, str]:
    """Where the star goes and its legend. ``done`` holds the COMPLETED trials with a ``y``, none diverged. Where a
    config has several of them, one lucky seed is no best config (the winner's curse): the star is the config whose
    mean of ``y`` over them (``summarize``'s) is best, at that mean, among the configs none of whose trials diverged,
    FAILED or were PRUNED (one seed left after another failed is as lucky as one alone); else the best trial. A tie
    says how many tie, and goes to the first in the table."""
    table = trials.reset_index(drop=True)  # two sweeps' tables concatenated repeat their index labels
    keys = config_keys(table)
    config = keyed(table, keys).groupby(keys, dropna=False, sort=False).ngroup()  # one number per config
    ok = (table.status == TrialStatus.COMPLETED) & table[y].notna()
    counts = config[ok].value_counts()
    if len(counts) and counts.max() > 1:
        diverged = table["diverged_at"].notna() if "diverged_at" in table else pd.Series(False, index=table.index)
        lost = diverged | table.status.isin([TrialStatus.FAILED, TrialStatus.PRUNED])  # survivors: the lucky seeds
        means = table[y][ok].groupby(config[ok], sort=False).mean()  # summarize's mean, configs in table order
        means = means[~means.index.isin(set(config[lost]))]
        if len(means):  # else every config with a value lost a trial: the best trial outside the diverged
            value = means.max() if maximise else means.min()
            first = next(k for k, v in means.items() if v == value)
            rows = table[ok & (config == first)]
            at_x = rows[x].iloc[0] if x in keys or not is_numeric_dtype(rows[x]) else rows[x].mean()
            n, tied = int(counts[first]), int((means == value).sum())
            also = f"; {tied} tied at {value:.3g}" if tied > 1 else ""
            return at_x, float(value), f"best mean {x} {_shown(at_x)} ({n} seed{'s' if n > 1 else ''}{also})"
    return _best_trial(done, x, y, maximise)


def _best_trial(done: pd.DataFrame, x: str, y: str, maximise: bool) -> tuple[Any, float, str]:
    """The best trial of ``done`` (the first of a tie) and its legend, saying how many tie."""
    value = done[y].max() if maximise else done[y].min()
    best = done.loc[done[y].idxmax() if maximise else done[y].idxmin()]
    tied = int((done[y] == value).sum())
    also = f" ({tied} tied at {value:.3g})" if tied > 1 else ""
    return best[x], float(best[y]), f"best trial {x} {_shown(best[x])}{also}"


def _shown(at: Any) -> str:
    """A star's ``x`` in its legend: a number to 2 significant figures, text (``x="optimizer"``) as it is."""
    return f"{at:.2g}" if isinstance(at, numbers.Real) else str(at)


def config_keys(trials: pd.DataFrame) -> list[Any]:
    """The columns that name a trial's config (led by its ``variant`` where the trials name one, as ``ablate``'s
    do): what ``summarize`` groups by, and ``search_plot``'s star."""
    keys = [c for c in trials.columns if c not in RESULT_COLUMNS] or ["label"]
    if "variant" in trials and trials["variant"].notna().any():  # two variants of one config (a {} control) merged
        keys = ["variant", *keys]
    return keys


def searched(trials: pd.DataFrame) -> str:
    """``search_plot``'s default ``x``: the learning rate if searched, else the first numeric column of the trials'
    configs (a row is its trial, label, config in the space's order, seed, then results: ``RESULT_COLUMNS``);
    ``ValueError`` naming ``x`` when there is none (a search of the optimizer alone)."""
    if LR in trials.columns:
        return LR
    config = [c for c in trials.columns if c not in RESULT_COLUMNS]
    numeric = [c for c in config if is_numeric_dtype(trials[c]) and not is_bool_dtype(trials[c])]
    if not numeric:
        raise ValueError(f"x: these trials searched no numeric parameter (their config columns: "
                         f"{', '.join(map(str, config)) or 'none'}); pass x= a numeric column")  # fmt: skip
    return str(numeric[0])


def check_column(trials: pd.DataFrame, name: str, column: str, numeric: bool = False) -> None:
    """``ValueError`` naming the argument and the table's numeric columns, not pandas' bare ``KeyError`` (with
    ``numeric``, also for a column of text: ``summarize(metric="reason")`` gave NaN for every config, silently)."""
    if column not in trials.columns or numeric and not pd.api.types.is_numeric_dtype(trials[column]):
        columns = ", ".join(str(c) for c in trials.select_dtypes("number").columns)
        kind = "a numeric column" if column in trials.columns else "a column"
        raise ValueError(f"{name}={column!r} is not {kind} of these trials; numeric columns: {columns}")


def check_trials(trials: pd.DataFrame, who: str) -> None:
    """``ValueError`` naming ``trials`` unless it is a table of trials with their ``status`` (a column the user
    dropped was pandas' bare ``KeyError: 'status'`` or ``AttributeError``)."""
    if not isinstance(trials, pd.DataFrame) or "status" not in trials.columns:
        got = f"a table of {', '.join(map(str, trials.columns))}" if isinstance(trials, pd.DataFrame) else repr(trials)
        raise ValueError(f"{who}: trials must be a sweep's table of trials (with its status column), such as "
                         f"sweep(...) or ablate(...)[0] return, got {got:.200}")  # fmt: skip


def _check_x(trials: pd.DataFrame, x: str) -> None:
    """``x`` is drawn as numbers or as text categories (``"optimizer"``); a column mixing them (a number typed over
    as ``"1e-3"``) was matplotlib's bare ``TypeError`` from deep in its unit conversion."""
    values = trials[x].dropna()
    if not is_numeric_dtype(trials[x]) and not all(isinstance(v, str) for v in values):
        text = next((v for v in values if isinstance(v, str)), None)
        other = next(v for v in values if not isinstance(v, str))
        if text is None or not isinstance(other, numbers.Real):  # a list typed in: it "mixed text (None)"
            bad = next(v for v in values if not isinstance(v, str | numbers.Real))
            raise ValueError(f"x={x!r} holds {bad!r}, which is neither a number nor text: pass x= a column of numbers, "
                             "or of text categories"[:300])  # fmt: skip
        raise ValueError(f"x={x!r} mixes text ({text!r}) with other values ({other!r}): it must be numbers, or text "
                         "categories")  # fmt: skip


def keyed(trials: pd.DataFrame, keys: Sequence[Any]) -> pd.DataFrame:
    """``trials`` with each of its ``keys`` columns that holds an unhashable value (a list, dict or array typed in by
    hand) as ``hashable`` values, which pandas can group by (else ``unhashable type: 'list'``); the caller's
    table is left as it was."""
    mapped = trials
    for key in keys:
        if trials[key].dtype == object and not all(can_hash(v) for v in trials[key]):
            mapped = mapped.copy() if mapped is trials else mapped
            mapped[key] = trials[key].map(hashable)
    return mapped


def _maximise(trials: pd.DataFrame, y: str) -> bool | None:
    """Whether the best of ``y`` is its largest, or None where neither end is better (``steps_done``, a config field):
    no star. ``value`` as the search's objective; a result column as ``BEST_IS_HIGHEST`` says, whatever the objective
    (a reward drawn from a search of the loss starred the worst trial, ``wall_s`` the slowest; ``LOSS_COLUMNS`` have
    no better end, their ranks float rounding); a column of your own
    named as a reward or a loss (``eval_reward``) as that word says."""
    if y == "value":
        return trials.attrs.get("objective", "reward") == "reward"
    if y in BEST_IS_HIGHEST or y in RESULT_COLUMNS:
        return BEST_IS_HIGHEST.get(y)
    return True if str(y).endswith("reward") else False if str(y).endswith("loss") else None
