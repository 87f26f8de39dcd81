"""``search_plot`` as drawn by Agg: its legend clear of the trials and the star, the user's text drawn as written (not
TeX), and its y label saying over how many steps the objective was averaged."""

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Affine2D

from rlnb.sweep import search_plot


def diverged_sweep() -> pd.DataFrame:
    """review38c's sweep of four rates × two seeds: 1e-3 learns, 1.0 does not, 1e3 and 1e6 diverge."""
    rows = []
    for i, (lr, value, status) in enumerate([(1e-3, 0.55, "COMPLETED"), (1.0, 0.25, "COMPLETED"),
                                             (1e3, 0.0, "COMPLETED"), (1e6, float("nan"), "FAILED")]):  # fmt: skip
        for seed in (0, 1):
            rows.append({"trial": 2 * i + seed, "label": f"learning_rate={lr:g}", "learning_rate": lr, "seed": seed,
                         "status": status, "value": value + 0.02 * seed, "steps_done": 8,
                         "diverged_at": 2.0 if lr >= 1e3 else None})  # fmt: skip
    trials = pd.DataFrame(rows)
    trials.attrs["objective"] = "reward"
    return trials


def test_search_plots_legend_is_right_of_its_axes_clear_of_every_trial_and_the_star():
    """In a 5 × 3 in figure the legend ("best") covered the lr=1e-3 points and the gold star: of "completed (6)"
    only 4 were visible."""
    ax = search_plot(diverged_sweep())
    canvas = FigureCanvasAgg(ax.figure)
    canvas.draw()
    box, axes = ax.get_legend().get_window_extent(canvas.get_renderer()), ax.bbox
    assert axes.x1 <= box.x0 and box.x1 <= ax.figure.bbox.width, (box.extents, axes.extents)
    assert axes.width >= 0.6 * ax.figure.bbox.width * 5 / ax.figure.get_figwidth()  # as wide as in a 5 in figure
    star = [c for c in ax.collections if isinstance(c, PathCollection)][-1]
    assert star.get_offsets().tolist() == [[1e-3, 0.56]]


def test_search_plot_on_the_users_axes_keeps_its_legend_inside_them():
    """The user's figure is never resized: right of their axes the legend would run off it."""
    figure = Figure(figsize=(6.4, 4.8), layout="constrained")
    canvas = FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    search_plot(diverged_sweep(), ax=ax)
    canvas.draw()
    box, axes = ax.get_legend().get_window_extent(canvas.get_renderer()), ax.bbox
    assert figure.get_size_inches().tolist() == [6.4, 4.8]
    assert axes.x0 <= box.x0 and box.x1 <= axes.x1 and axes.y0 <= box.y0 and box.y1 <= axes.y1


@pytest.mark.parametrize("size", [(4, 3), (6.4, 4.8)])
def test_search_plot_on_the_users_axes_keeps_its_legend_off_the_star(size):
    """On a 4 × 3 in figure of the user's the legend ("best", which counts a marker as its centre) covered the gold
    star's left half: x 54-74 px under a legend from 66."""
    figure = Figure(figsize=size)
    canvas = FigureCanvasAgg(figure)
    ax = search_plot(diverged_sweep(), ax=figure.add_subplot())
    canvas.draw()
    star = [c for c in ax.collections if isinstance(c, PathCollection)][-1]
    shape = star.get_paths()[0].transformed(Affine2D(star.get_transforms()[0])).get_extents()  # as drawn, in pixels
    at = star.get_offset_transform().transform(star.get_offsets()[0])
    box, legend = shape.translated(*at), ax.get_legend().get_window_extent(canvas.get_renderer())
    assert box.width > 10 and not box.overlaps(legend), (box.extents.round(), legend.extents.round())


def test_search_plot_draws_dollars_in_variants_as_written_not_as_tex():
    """Variants "cost $5 and $6" and "price $a$ low": the x ticks and the star's legend came out as "cost 5and6" in
    math italics."""
    names = ["cost $5 and $6", "price $a$ low"]
    trials = pd.DataFrame({"trial": [0, 1], "variant": names, "label": ["a", "b"], "seed": 0,
                           "status": "COMPLETED", "value": [0.2, 0.7], "steps_done": 5})  # fmt: skip
    ax = search_plot(trials, x="variant")
    FigureCanvasAgg(ax.figure).draw()
    texts = [t for t in ax.figure.findobj(Text) if "$" in t.get_text() and t.get_visible()]
    assert {t.get_text() for t in texts} >= {*names, "best trial variant price $a$ low"}
    assert not [t.get_text() for t in texts if t.get_parse_math()]


@pytest.mark.parametrize(
    ("steps", "said"),
    [
        (3, "mean of the last 3 steps"),
        (1, "the last step"),
        (5, "mean of the last 5 steps"),
        (40, "mean of the last 5 steps"),
    ],
)
def test_search_plots_y_label_says_over_how_many_steps_the_objective_is_a_mean(steps, said):
    """With ``steps=3`` the objective is the mean of 3 steps, and the label said "of the last 5 steps"."""
    trials = pd.DataFrame({"trial": [0, 1, 2], "label": ["a", "b", "c"], "learning_rate": [1e-3, 1e-2, 1e-1],
                           "seed": 0, "status": ["COMPLETED", "COMPLETED", "PRUNED"], "value": [0.2, 0.7, 0.1],
                           "steps_done": [steps, steps, 1]})  # fmt: skip
    trials.attrs["objective"] = "loss"
    assert search_plot(trials).get_ylabel() == f"loss ({said})"


def test_search_plots_log_axis_ticks_stay_matplotlibs_tex():
    """Drawing every text as written took the log axis' own tick labels too: "$\\mathdefault{10^{-2}}$" drawn as
    those characters."""
    ax = search_plot(diverged_sweep())
    FigureCanvasAgg(ax.figure).draw()
    ticks = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    assert ax.get_xscale() == "log" and ticks and all("mathdefault" in t.get_text() for t in ticks)
    assert all(t.get_parse_math() for t in ticks)
