"""``plots.compare``: several runs on one axes, each group of seeds as its mean and a band.

Kept apart from ``plots`` because it draws a comparison of runs (``rlnb.compare``'s table, grouped by
config and seed), where the rest of ``plots`` draws one run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rlnb._input.shown import printable
from rlnb.history import History
from rlnb.history.catalog import compare as compare_runs
from rlnb.viz import insidelegend, placing
from rlnb.viz.draw import STD_BAND_MIN_SEEDS, all_nan, check_name, new_axes, note, numbers, once_per_step
from rlnb.viz.lines import MARKERS_UP_TO, MAX_POINTS, decimate, extremes, infinite, smooth
from rlnb.viz.names import long_name

GROUP_MARKERS = ("", "s", "^", "D", "v", "P", "*")
"""Past ten groups the colours come round again: each further ten carries the next of these markers (70 groups
told apart); else 30 runs would be 30 lines in 10 colours, three to a colour and the legend unable to say which."""
LEGEND_ROW_IN = 0.2
"""Inches per legend row (``fontsize="small"``)."""
MAX_HEIGHT_IN = 12.0
"""A new figure grows this tall at most for its legend; past it the legend takes more columns."""


def group_style(i: int) -> tuple[str, str]:
    """The colour and marker of the ``i``-th group: distinct for the first ``10 * len(GROUP_MARKERS)``."""
    return f"C{i % 10}", GROUP_MARKERS[i // 10 % len(GROUP_MARKERS)]


def _legend(ax: Axes, handles: list[Artist], names: list[str], own: bool) -> None:
    """Each group named, as given: explicit labels, since matplotlib leaves a line out of the legend when its label
    starts with ``_`` (a run named ``_scratch`` would be unlisted). A few names that fit go inside the axes; else, on a
    figure this call made, right of the axes, the figure grown to list them in one column (up to ``MAX_HEIGHT_IN``)
    and as wide as their widest (two ~100-character sweep labels inside squashed the axes to a third of the figure
    and cut each name's start off it); on the user's axes, fitted inside them as drawn (``insidelegend``)."""
    if not own or insidelegend.plain(ax, names):
        insidelegend.legend(ax, handles, names)
        return
    fig = cast(Figure, ax.get_figure(root=True))  # an Axes is always on a figure
    width, height = fig.get_size_inches()
    height = min(max(height, (len(names) + 3) * LEGEND_ROW_IN), MAX_HEIGHT_IN)
    fig.set_size_inches(width, height)
    placing.beside(ax, handles, names, grow=True, ncols=math.ceil(len(names) / max(1, int(height / LEGEND_ROW_IN) - 3)))


def _no_column(frame: pd.DataFrame, by: str) -> str:
    """What ``compare`` says of a table without its ``by`` column: another of the columns to group by, or (no ``run``
    column: ``history.steps`` or ``history.logged`` of one run) what it takes instead."""
    if "run" in frame:
        shown = ", ".join(c for c in frame.columns if c not in ("seed", "step"))
        return f"by={by!r} is not a column of these runs' table; group by 'run' or one of: {shown}"
    has = ", ".join(map(str, frame.columns)) or "none"
    return (f"by={by!r} is not a column of this table: plots.compare takes rlnb.compare([h1, h2]) or a list of runs, "
            f"plots.metric draws one run (this table has {has})")[:300]  # fmt: skip


def compare(
    frame_or_histories: pd.DataFrame | Iterable[History | str],
    y: str,
    ax: Axes | None,
    ema: float | None,
    by: str,
    band: str,
) -> Axes:
    """The figure ``plots.compare`` documents, with every argument given: the defaults are ``plots.compare``'s alone."""
    check_name("y", y)
    check_name("by", by)
    if band not in ("auto", "minmax", "std", "seeds"):
        raise ValueError(f"band must be 'auto', 'minmax', 'std' or 'seeds', got {band!r}")
    # not list(): a path would be its characters, each "not an rlnb run folder"; compare_runs names what it takes
    given = frame_or_histories
    frame = given if isinstance(given, pd.DataFrame) else compare_runs(given)
    if by not in frame:  # before the emptiness: compare(h.logged) of a new run was a bare KeyError: 'run'
        raise ValueError(_no_column(frame, by))
    if len(frame) and y not in frame:
        shown = ", ".join(c for c in frame.columns if c not in ("run", "seed", "step"))
        raise ValueError(f"y={y!r} is not a column of these runs' steps tables; they have: {shown}")
    if len(frame):
        frame = frame.assign(**{y: numbers(frame, y)})  # a text in it: named, not pandas' bare "could not convert"
    own = ax is None
    ax = new_axes(ax)
    ax.set(xlabel="optimizer step", ylabel=long_name(y), title=f"{long_name(y)} by {printable(by)}")
    missing: list[str] = []
    handles: list[Artist] = []
    names: list[str] = []
    for i, (label, group) in enumerate(frame.groupby(by, sort=False, dropna=False)):
        seeds = group.groupby("seed", sort=False, dropna=False) if "seed" in group else [(None, group)]
        members = [once_per_step(ax, m) for _, m in seeds]  # a step twice in a seed: averaged as two seeds
        series = [m[y].to_numpy(dtype=float) if ema is None else smooth(m[y], ema) for m in members]
        # a seed with no value of y (pruned before its first evaluation) is no member: not "(2 seeds)" of one
        kept = [i for i, s in enumerate(series) if (~np.isnan(s)).any()] or list(range(len(series)))
        members, series = [members[i] for i in kept], [series[i] for i in kept]
        values = pd.DataFrame({"step": np.concatenate([m["step"] for m in members]), y: np.concatenate(series)})
        # only the steps that have it: a metric logged every k steps (NaN between) would draw no line at all, and a
        # run without it would be an empty line in the legend
        values = values.dropna(subset=[y])
        if values.empty:
            missing.append(printable(label))
            continue
        stats = values.groupby("step")[y].agg(["mean", "std", "min", "max", "count"])
        x, mean = stats.index.to_numpy(dtype=float), stats["mean"].to_numpy()
        color, mark = group_style(i)
        name = f"{printable(label)} ({len(members)} seeds)" if len(members) > 1 else printable(label)
        # past the last step every seed reached, the mean is of those left: dashed, not "(n seeds)" any more
        every = np.flatnonzero(stats["count"].to_numpy() == len(members))
        end = every[-1] + 1 if len(every) else 1
        # a marker at each point while there are few: a run of one step is a line of one point, drawn as nothing
        # (in its group's marker, at every point while few, else spaced along the line)
        few = len(x) <= MARKERS_UP_TO
        marks: dict[str, Any] = {"marker": mark or ("o" if few else ""), "ms": 3 if few or not mark else 5,
                 "markevery": None if few else 0.1}  # fmt: skip
        handles += ax.plot(*decimate(x[:end], mean[:end]), color=color, label=name, **marks)
        names.append(name)
        for marked in infinite(ax, x, mean, color, name):  # a seed at inf makes the mean inf: no point on a line
            handles.append(marked)
            names.append(str(marked.get_label()))
        if end < len(x):
            ax.plot(*decimate(x[end - 1 :], mean[end - 1 :]), color=color, ls="--", label="_fewer seeds", **marks)
        if len(members) < 2:
            continue
        if band == "seeds":
            for m, s in zip(members, series, strict=True):
                has = ~np.isnan(s)
                ax.plot(*decimate(m["step"].to_numpy(dtype=float)[has], s[has]), color=color, lw=0.7, alpha=0.5)
            continue
        low, high = stats["min"].to_numpy(), stats["max"].to_numpy()
        if band == "std" or (band == "auto" and len(members) >= STD_BAND_MIN_SEEDS):
            std = stats["std"].to_numpy()
            if band == "std":
                low, high = mean - std, mean + std
            else:  # many seeds: the spread of the typical seed, never past the extreme ones
                low, high = np.maximum(low, mean - std), np.minimum(high, mean + std)
        keep = extremes(low, high, MAX_POINTS)
        ax.fill_between(x[keep], low[keep], high[keep], color=color, alpha=0.25, lw=0)
    if frame.empty:  # bare axes said nothing, where an overview of an empty history says why
        note(ax, "no steps in these runs yet" if set(frame.columns) - {"run", "seed", "step"} else "no runs to compare")
    elif missing and len(missing) == frame[by].nunique(dropna=False):  # a run that never logged y is NaN there too
        note(ax, all_nan(y, per_step=True, where=" of these runs"))
    elif missing:
        ax.set_title(f"{long_name(y)} by {printable(by)}\n(all NaN: {', '.join(missing)})", fontsize="small")
    if handles:
        _legend(ax, handles, names, own)
    return ax
