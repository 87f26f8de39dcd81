"""A live panel's axes (``rlnb.viz.livefig``): the x axis' end in coarse steps, so that most redraws keep the
limits and only blit the lines, and the ticks matplotlib makes: only those it draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np
from matplotlib.ticker import AutoLocator, MaxNLocator

NICE = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


X_ROOM = 1.05
"""The x axis ends at a round number past this multiple of the newest step."""


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k that is >= ``value`` (> 0)."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(m * scale for m in NICE if m * scale >= value * (1 - 1e-12))


class InView(MaxNLocator):
    """``MaxNLocator``'s locations inside the axis' limits only: matplotlib makes a tick (five artists, two of them
    texts) for each location a locator gives, one past each end of the axis included, and draws those inside."""

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        locs = np.asarray(super().tick_values(vmin, vmax))
        low, high = sorted((vmin, vmax))
        room = (high - low) * 1e-9  # matplotlib draws a tick within 1e-10 of the axis' span past its end
        return cast(Sequence[float], locs[(locs >= low - room) & (locs <= high + room)])


class AutoInView(InView, AutoLocator):
    """matplotlib's locator of a linear axis (``AutoLocator``, classic style's steps too), in view only."""
