"""``plots.compare``: several runs on one axes, each group of seeds as its mean and a band.

Kept apart from ``plots`` because it draws a comparison of runs (``rlnb.compare``'s table, grouped by
config and seed), where the rest of ``plots`` draws one run.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from rlnb.history import History
from rlnb.history.catalog import compare as compare_runs
from rlnb.viz.draw import MARKERS_UP_TO, MAX_POINTS, STD_BAND_MIN_SEEDS, decimate, extremes, new_axes, note, smooth


def compare(
    frame_or_histories: pd.DataFrame | Iterable[History | str],
    y: str = "loss",
    ax: Axes | None = None,
    ema: float | None = None,
    by: str = "run",
    band: str = "auto",
) -> Axes:
    """The figure ``plots.compare`` documents."""
    if band not in ("auto", "minmax", "std", "seeds"):
        raise ValueError(f"band must be 'auto', 'minmax', 'std' or 'seeds', got {band!r}")
    if isinstance(frame_or_histories, pd.DataFrame):
        frame = frame_or_histories
    else:
        frame = compare_runs(list(frame_or_histories))
    if len(frame) and y not in frame:
        shown = ", ".join(c for c in frame.columns if c not in ("run", "seed", "step"))
        raise ValueError(f"y={y!r} is not a column of these runs' steps tables; they have: {shown}")
    if len(frame) and by not in frame:
        raise ValueError(f"by={by!r} is not a column of these runs' table; group by 'run' or one of: "
                         f"{', '.join(c for c in frame.columns if c not in ('seed', 'step'))}")
    ax = new_axes(ax)
    ax.set(xlabel="optimizer step", ylabel=y, title=f"{y} by {by}")
    missing = []
    for i, (label, group) in enumerate(frame.groupby(by, sort=False, dropna=False)):
        seeds = group.groupby("seed", sort=False, dropna=False) if "seed" in group else [(None, group)]
        members = [m.sort_values("step") for _, m in seeds]
        series = [m[y].to_numpy(dtype=float) if ema is None else smooth(m[y], ema) for m in members]
        values = pd.DataFrame({"step": np.concatenate([m["step"] for m in members]), y: np.concatenate(series)})
        # only the steps that have it: a metric logged every k steps (NaN between) drew no line at all, and a
        # run without it was an empty line in the legend
        values = values.dropna(subset=[y])
        if values.empty:
            missing.append(str(label))
            continue
        stats = values.groupby("step")[y].agg(["mean", "std", "min", "max", "count"])
        x, mean = stats.index.to_numpy(dtype=float), stats["mean"].to_numpy()
        color = f"C{i % 10}"
        name = f"{label} ({len(members)} seeds)" if len(members) > 1 else str(label)
        # past the last step every seed reached, the mean is of those left: dashed, not "(n seeds)" any more
        every = np.flatnonzero(stats["count"].to_numpy() == len(members))
        end = every[-1] + 1 if len(every) else 1
        # a marker at each point while there are few: a run of one step was a line of one point, drawn as nothing
        marker = "o" if len(x) <= MARKERS_UP_TO else ""
        ax.plot(*decimate(x[:end], mean[:end]), color=color, label=name, marker=marker, ms=3)
        if end < len(x):
            ax.plot(*decimate(x[end - 1 :], mean[end - 1 :]), color=color, ls="--", label="_fewer seeds",
                    marker=marker, ms=3)
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
    if missing and len(missing) == frame[by].nunique(dropna=False):
        note(ax, f"no {y!r} logged in these runs")
    elif missing:
        ax.set_title(f"{y} by {by}\n(none logged: {', '.join(missing)})", fontsize="small")
    if len(frame) and len(missing) < frame[by].nunique(dropna=False):
        ax.legend(loc="best", fontsize="small")
    return ax
