"""A learning-rate range test's result (``lr_find``'s ``LRFind``): the rates, the objective and its smoothed curve,
the suggestion and why, and its figure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rlnb.params import OptimizerParams
from rlnb.viz import insidelegend
from rlnb.viz.draw import within_span
from rlnb.viz.plots import NotebookFigure
from rlnb.viz.texts import wrap_to_panel
from rlnb.wire import MuonScaling, OptimizerKind

from ..figures import check_axes
from ..trial import Objective
from .curve import why_none


@dataclass
class LRFind:
    """A range test's result. ``plot()`` draws the objective against the learning rate with the
    suggestion marked; ``frame`` is the per-step table; ``params`` is ``base`` with the suggested
    rate(s), or None."""

    lrs: list[float]
    values: list[float]
    smoothed: list[float]
    suggestion: float | None
    """The suggested rate (Muon: Muon's own), to two significant figures; None: no clear suggestion."""
    objective: Objective
    optimizer: OptimizerKind
    muon_scaling: MuonScaling | None
    """The convention of every rate here, for Muon; None for Adam."""
    reason: str
    """For people: how the suggestion was chosen, or why there is none, and every note after it (where a loss
    diverged, ``at_chance``, ``ended``, the AdamW rate, a late wait's), joined by "; ". Code reads the fields."""
    run_path: str | None = None
    adam_ratio: float | None = None
    """Muon: the AdamW rate / the Muon rate, kept at every step (the AdamW rate at ``lrs[i]`` is
    ``adam_ratio × lrs[i]``); None for Adam."""
    params: OptimizerParams | None = None
    interrupted: bool = False
    """A Ctrl-C ended the test (wherever it landed: a step, the log, ``progress``, the final wait, the close): the steps
    measured are the result, as with ``stop``. A script calling ``lr_find`` in a loop stops on it (the Ctrl-C
    went no further): ``if found.interrupted: raise KeyboardInterrupt``."""
    extra: dict[str, Any] = field(default_factory=dict)
    chance: float | None = None
    """The reward of the best constant answer (a ``VerifiedTask``'s ``chance``, drawn as a line); None: not known."""
    chosen: str = ""
    """How the suggestion was chosen, or why there is none (``suggest``'s words), without the notes ``reason`` adds;
    "" where it was not given: ``reason`` whole (an ``LRFind`` made with a reason of one part)."""
    ended: str | None = None
    """Why the test ended before its last rate (``Measured.ended``), or None where every rate was measured."""
    at_chance: str | None = None
    """Why the reward's rise is no sign of learning (``curve.at_chance``), or None."""

    def __post_init__(self) -> None:
        self.chosen = self.chosen or self.reason

    @property
    def frame(self) -> pd.DataFrame:
        """One row per step: learning rate (Muon: and the AdamW rate), the objective and its smoothed value."""
        frame = pd.DataFrame({"learning_rate": self.lrs, self.objective: self.values, "smoothed": self.smoothed})
        if self.adam_ratio is not None:
            frame.insert(1, "adam_learning_rate", [lr * self.adam_ratio for lr in self.lrs])
        return frame

    def figure(self) -> Figure:
        """A new figure with ``plot()`` on it; a notebook shows it where it is returned."""
        fig = NotebookFigure(figsize=(5, 3), layout="constrained")  # shows itself where a notebook returns it
        self.plot(fig.add_subplot())
        return fig

    def plot(self, ax: Axes | None = None) -> Axes:
        """The objective per step and smoothed against the learning rate (log x), the suggestion dashed."""
        check_axes(ax)  # a Figure was "'Figure' object has no attribute 'plot'"
        if ax is None:
            return self.figure().axes[0]
        ax.plot(self.lrs, self.values, ".", color="0.6", label=f"{self.objective} per step")
        ax.plot(self.lrs, self.smoothed, color="C0", label="smoothed")
        if self.chance is not None and self.objective == "reward" and self.lrs:  # one answer for every prompt scores it
            # (no rate yet, the line alone left the log x axis at its linear default: "cannot be log-scaled")
            ax.axhline(self.chance, color="0.4", ls=":", label=f"a constant answer (chance {self.chance:.2g})")
        if self.suggestion is not None:
            ax.axvline(self.suggestion, color="C3", ls="--", label=f"suggested {self.suggestion:.2g}")
        unit = f" ({self.muon_scaling} scaling)" if self.muon_scaling else ""
        together = f"\nAdamW part at {self.adam_ratio:.2g}× it" if self.adam_ratio is not None else ""
        ax.set(
            xscale="log",
            xlabel=f"{self.optimizer} learning rate{unit}{together}",
            ylabel=self.objective,
            title="learning-rate range test" if self.suggestion is not None else why_none(self.reason),
        )
        if self.suggestion is None:
            ax.title.set_fontsize("small")  # a few lines of why
        for text in (ax.title, ax.xaxis.label):  # on a grid's panel, over its neighbours; the why past a 4 in figure
            wrap_to_panel(ax, text)
        insidelegend.legend(ax)  # fitted to the user's axes as drawn
        within_span(ax)  # a loss near 1.7e308 failed when drawn (the tick locator's arange), as plots.metric did
        return ax
