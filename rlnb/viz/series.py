"""A live view's lines, fed point by point, that cost the same at step 10 and at step 100,000.

``Series`` takes points one at a time and keeps at most ``cap`` of them: min/max buckets whose width
doubles as the series grows (each bucket keeps its lowest and highest point, so spikes survive), plus
its exponential moving average kept the same way. Appending is O(1) amortised; nothing is rebuilt.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

LIVE_POINTS = 512
"""Points drawn per line, at most: a lowest and a highest point per horizontal pixel of a panel."""


def _merge(a: list[float], b: list[float]) -> list[float]:
    """Two consecutive buckets as one: the first's first point, the lower minimum, the higher maximum."""
    lo = a[3:5] if a[4] <= b[4] else b[3:5]
    hi = a[5:7] if a[6] >= b[6] else b[5:7]
    return [a[0] + b[0], a[1], a[2], *lo, *hi]


class _Buckets:
    """Min/max decimation on the fly: up to ``cap`` buckets of ``width`` consecutive points each (the
    width doubles when they are full); drawn as exactly ``cap // 2`` groups once there are that many,
    so a line costs the same to draw at any length."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.width = 1  # points per bucket, a power of two
        # One bucket: [count, first x, first y, x of min, min y, x of max, max y]; NaNs are skipped
        # for min/max, and an all-NaN bucket draws its first point: the gap stays a gap.
        self.buckets: list[list[float]] = []

    def add(self, x: float, y: float) -> None:
        last = self.buckets[-1] if self.buckets else None
        if last is None or last[0] >= self.width:
            if len(self.buckets) >= self.cap:  # full: halve, pairing neighbours
                pairs = zip(self.buckets[0::2], self.buckets[1::2], strict=False)
                self.buckets = [_merge(a, b) for a, b in pairs] + self.buckets[len(self.buckets) // 2 * 2 :]
                self.width *= 2
            inf = math.inf
            last = [0, x, y, x, inf, x, -inf]
            self.buckets.append(last)
        last[0] += 1
        if y < last[4]:
            last[3], last[4] = x, y
        if y > last[6]:
            last[5], last[6] = x, y

    def xy(self) -> tuple[np.ndarray, np.ndarray]:
        buckets, groups = self.buckets, self.cap // 2
        if len(buckets) > groups:  # 1 or 2 buckets per group
            edges = [i * len(buckets) // groups for i in range(groups + 1)]
            buckets = [
                buckets[a] if b - a == 1 else _merge(buckets[a], buckets[a + 1]) for a, b in itertools.pairwise(edges)
            ]
        xs: list[float] = []
        ys: list[float] = []
        for _, fx, fy, xlo, ylo, xhi, yhi in buckets:
            if ylo == math.inf:  # no finite point in the bucket
                xs.append(fx)
                ys.append(fy)
            elif xlo == xhi:
                xs.append(xlo)
                ys.append(ylo)
            else:
                first, second = ((xlo, ylo), (xhi, yhi)) if xlo < xhi else ((xhi, yhi), (xlo, ylo))
                xs += [first[0], second[0]]
                ys += [first[1], second[1]]
        return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)


class Series:
    """A line fed point by point: its decimated points, their EMA (``s = ema·s + (1 − ema)·y``, NaNs and
    infinities skipped and kept as gaps, as ``plots.smooth``), how many points came, the finite range, and the
    steps at +inf and at -inf (``infs``: decimated alike, to be marked on the frame as the static plots do)."""

    def __init__(self, ema: float = 0.9, cap: int = LIVE_POINTS) -> None:
        self.ema = ema
        self.raw = _Buckets(cap)
        self.smooth = _Buckets(cap)
        self.infs = {"+": _Buckets(cap), "-": _Buckets(cap)}
        self.inf_n = {"+": 0, "-": 0}
        self.n = 0
        self.lo, self.hi = math.inf, -math.inf
        self.pos_lo = math.inf  # the lowest point above 0: a log axis' floor where the line holds a 0
        self.finite = self.below = 0  # finite points, and those <= 0 among them: what a log axis leaves out
        self.last = math.nan
        self.last_x = math.nan
        self._state = math.nan

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.last, self.last_x = y, x
        if math.isinf(y):
            sign = "+" if y > 0 else "-"
            self.infs[sign].add(x, x)
            self.inf_n[sign] += 1
        y = y if math.isfinite(y) else math.nan  # an inf is a gap, as in the static plots: not the range, not the EMA
        self.raw.add(x, y)
        if math.isnan(y):
            self.smooth.add(x, y)
            return
        self.lo, self.hi = min(self.lo, y), max(self.hi, y)
        self.finite += 1
        self.below += y <= 0
        if 0 < y < self.pos_lo:
            self.pos_lo = y
        self._state = y if math.isnan(self._state) else self.ema * self._state + (1 - self.ema) * y
        self.smooth.add(x, self._state)

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        for x, y in zip(xs, ys, strict=True):
            self.add(x, y)
