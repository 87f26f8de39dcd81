"""``plots.timeline``'s error-code labels as Agg draws them: inside the axes, clear of the legend beside them, and
never on top of one another."""

import itertools

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rlnb import wire
from rlnb.viz import plots

FAILED, COMPLETED = wire.OperationStatus.FAILED, wire.OperationStatus.COMPLETED
NON_FINITE = wire.OperationErrorCode.NON_FINITE_LOSS
KINDS = ("forward-backward", "optim-step", "sample", "weights-sync")


def operations(n: int, failed_every: int) -> pd.DataFrame:
    """``n`` operations 0.5 s apart, lanes in turn, every ``failed_every``-th FAILED (``NON_FINITE_LOSS``), the last
    one too: how a run that diverged ends."""
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    at = t0 + pd.to_timedelta(np.arange(n) * 0.5, unit="s")
    failed = (np.arange(n) % failed_every == failed_every - 1) | (np.arange(n) == n - 1)
    return pd.DataFrame({"kind": [KINDS[i % 4] for i in range(n)], "status": np.where(failed, FAILED, COMPLETED),
                         "error_code": np.where(failed, NON_FINITE, None), "submitted_at": at, "started_at": at,
                         "finished_at": at + pd.Timedelta(0.4, unit="s")})  # fmt: skip


def drawn_labels(ops: pd.DataFrame):
    ax = plots.timeline(ops)
    canvas = FigureCanvasAgg(ax.figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    shown = [t for t in ax.texts if t.get_visible()]
    return ax, shown, [t.get_window_extent(renderer) for t in shown], ax.get_legend().get_window_extent(renderer)


def test_the_last_operations_failure_label_is_inside_the_axes_clear_of_the_legend():
    """A run that diverged: its last operation failed, and its label ran from 476 to 564 px, past the axes' end at
    484 and under the legend from 490."""
    ax, shown, labels, legend = drawn_labels(operations(12, 100))
    assert [t.get_text() for t in shown] == ["NON_FINITE_LOSS"]
    for box in labels:
        assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1 and not box.overlaps(legend), (box.extents, ax.bbox)


def test_dense_failures_are_labelled_apart_not_piled_up():
    """1 in 50 of 100k operations failed: the 25 latest labels were printed on top of one another in one blob."""
    ax, shown, labels, legend = drawn_labels(operations(2000, 50))
    assert 2 <= len(labels) <= 25
    assert not [(a.extents, b.extents) for a, b in itertools.combinations(labels, 2) if a.overlaps(b)]
    assert all(ax.bbox.x0 <= b.x0 and b.x1 <= ax.bbox.x1 and not b.overlaps(legend) for b in labels)
    assert max(t.xy[0] for t in shown) == max(t.xy[0] for t in ax.texts)  # the latest failure keeps its label


def inside(box, axes) -> bool:
    return axes.x0 <= box.x0 and box.x1 <= axes.x1 and axes.y0 <= box.y0 and box.y1 <= axes.y1


def test_a_bottom_lane_failure_label_stays_inside_the_axes_above_its_mark():
    """Axes 1.2 in tall: the bottom lane's label, 8 pt below its mark, ran from y 11 to 21 px across the axes' lower
    edge at 13, into the tick labels. It goes above its mark where below would leave the axes."""
    figure = Figure(figsize=(6.4, 1.2))
    canvas = FigureCanvasAgg(figure)
    ax = plots.timeline(operations(12, 3), ax=figure.add_subplot())
    canvas.draw()
    renderer = canvas.get_renderer()
    shown = [t for t in ax.texts if t.get_visible()]
    assert [(t.get_text(), box.extents.round()) for t in shown if not inside(box := t.get_window_extent(renderer),
                                                                             ax.bbox)] == []  # fmt: skip
    bottom = [t for t in shown if t.xy[1] == len(KINDS) - 1]
    assert bottom and all(t.get_window_extent(renderer).y0 >= ax.transData.transform(t.xy)[1] for t in bottom)
