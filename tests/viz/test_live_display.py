"""How a live view takes its place in a notebook: its size on a laptop's screen, read from the PNGs it draws, and
its outputs in a real IPython kernel, with and without the cell id a front end may send."""

import io
import math
import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
from PIL import Image

from rlnb.history import History
from rlnb.viz.live import LiveView
from tests.support.histories import hand_history, optim_metrics
from tests.support.kernels import kernel

COLUMN = 930
"""Pixels: the width of a JupyterLab 4 notebook's output on a 1366×768 laptop with its file browser open (measured
in Chromium: 934 px, of which the live view's box takes 930)."""
GAP = 4
"""Pixels: the margin ipywidgets puts between two images in a row."""


def drawn_sizes(view):
    return [Image.open(io.BytesIO(view.images[name].value)).size for name in view.panels]


def rows_in(widths, column=COLUMN):
    """How many rows a wrapping row of images of these widths takes in ``column`` pixels, as flex-wrap lays them."""
    rows, used = 1, -GAP
    for w in widths:
        if used + GAP + w > column:
            rows, used = rows + 1, w
        else:
            used += GAP + w
    return rows


def test_a_bare_live_view_draws_its_three_panels_in_one_row_of_a_laptops_notebook():
    """``LiveView(h)``: loss, gradient norm and learning rate were 320 + 432 + 320 px wide, wrapped onto two rows in
    JupyterLab on a 1366×768 laptop: the view was 727 px tall there (939 px elsewhere), taller than the ~600 px of
    notebook a laptop shows. Three panels or more now share a row of the column; fewer keep their size."""
    view = LiveView(hand_history([1.0, 0.5, 0.25], norms=[0.3, 0.2, 0.1]), every=0)
    try:
        sizes = drawn_sizes(view)
        assert len(sizes) == 3 and {h for _, h in sizes} == {208}
        assert rows_in([w for w, _ in sizes]) == 1, sizes
        assert [view.images[n].layout.width for n in view.panels] == [f"{w}px" for w, _ in sizes]
    finally:
        view.close()
    reward = LiveView(hand_history([1.0], norms=[0.3]), metrics=("reward",), loss=False, learning_rate=False)
    try:
        assert drawn_sizes(reward) == [(320, 208), (432, 208)]  # two panels: as wide as ever
    finally:
        reward.close()
    auto = LiveView(History(), metrics=None, every=0)  # panels come as figures are logged: sized for three a row
    try:
        auto.history.log(1, reward=0.5, acc=0.1)
        auto.refresh()
        sizes = drawn_sizes(auto)
        assert len(sizes) == 5 and rows_in([w for w, _ in sizes]) == 2, sizes
    finally:
        auto.close()


def readable(panel):
    """Whether every text of a drawn panel can be read: its title and x tick labels (those in view) on the figure, no
    two tick labels overlapping, and its legend's every label within the axes (inside) or the figure (beside)."""
    renderer = panel.canvas.get_renderer()
    page, frame = panel.figure.bbox, panel.ax.bbox
    low, high = panel.ax.get_xlim()
    shown = [t for t in panel.ax.xaxis.get_major_ticks() if low <= t.get_loc() <= high]
    ticks = [t.label1.get_window_extent(renderer) for t in shown]
    boxes = [panel.ax.title.get_window_extent(renderer), *ticks]
    legend = panel.ax.get_legend()
    labels = [t.get_window_extent(renderer) for t in legend.get_texts()] if legend is not None else []
    room = page if panel.beside else frame
    return (
        all(page.x0 <= b.x0 and b.x1 <= page.x1 for b in boxes)
        and all(a.x1 < b.x0 for a, b in zip(ticks, ticks[1:], strict=False))
        and all(room.x0 <= b.x0 and b.x1 <= room.x1 and room.y0 <= b.y0 and b.y1 <= room.y1 for b in labels)
    )


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_an_rl_live_views_four_panels_share_one_row_of_a_laptops_notebook_each_readable():
    """``LiveView(h, metrics=("reward",))``, the RL case, drew four panels at 272 + 272 + 368 + 272 px: two rows, 727 px
    tall in JupyterLab on a 1366×768 laptop. From four panels on each is 228 px wide, the gradient norm's legend
    inside its axes (over the lines, on a pale ground), so four share a row; in them a long legend label is broken
    into lines (``reward (train) +inf (1 step, on the frame)`` ran off the axes), and the x axis has fewer ticks
    (``100000`` and ``125000`` overlapped, as they did in the three-panel view's gradient norm)."""
    parts = {"grad_norm/muon": 0.7, "grad_norm/adam": 0.2}
    h = hand_history([1.0, 0.5, 0.25], [1.0, 0.8, 0.6], {"optimizer": "muon"}, lambda gn: optim_metrics(gn, **parts))
    for step, reward in enumerate([0.1, math.inf, 0.3], 1):
        h.log(step, reward=reward)
    view = LiveView(h, metrics=("reward",), every=0)
    three = LiveView(h, metrics=("reward",), every=0, learning_rate=False)
    try:
        sizes = drawn_sizes(view)
        assert sizes == [(228, 208)] * 4 and rows_in([w for w, _ in sizes]) == 1, sizes
        assert drawn_sizes(three) == [(272, 208), (272, 208), (368, 208)]  # three a row, the legend beside
        grad = view.panels["grad_norm"]
        assert not grad.beside and len(grad.ax.get_legend().get_texts()) == 4  # global, Muon, AdamW, clip
        assert "\n" in view.panels["reward"].ax.get_legend().get_texts()[-1].get_text()  # the +inf label, broken
        for name, panel in [*view.panels.items(), ("three's grad_norm", three.panels["grad_norm"])]:
            assert readable(panel), name
            panel.set_limits(99_000, 0.0, 1.0)  # six-digit steps: the widest tick labels
            panel.render()
            assert readable(panel), (name, "at step 99,000")
    finally:
        view.close()
        three.close()


def widget_of(content):
    return content["data"].get("application/vnd.jupyter.widget-view+json", {}).get("model_id")


@pytest.mark.slow  # an IPython kernel
def test_where_no_cell_id_comes_a_live_view_replaces_its_own_display(tmp_path):
    """A front end that sends no cell id (classic Notebook 6, some VS Code versions, a plain ``IPython.display``):
    ``display(view)`` at every step piled up one output per call, and ``view = LiveView(h); view`` run again left
    the earlier view following its history, its output still drawn wherever the front end kept it. A view's
    outputs now carry a display id: shown again in one run, it updates its output in place; a newer view of the
    same History shown in a later run takes its place (its outputs say so) and closes it."""
    with kernel(tmp_path) as run:
        shown, model = run("first = live.LiveView(h); first", ask="first.widget.model_id")
        assert [kind for kind, _ in shown] == ["display_data"] and widget_of(shown[0][1]) == model.strip("'")
        first_id = shown[0][1]["transient"]["display_id"]
        again, _ = run("for _ in range(3):\n    display(first)")  # one output, updated: not three
        assert [kind for kind, _ in again] == ["display_data", "update_display_data", "update_display_data"]
        loop_id = again[0][1]["transient"]["display_id"]
        assert {c["transient"]["display_id"] for _, c in again} == {loop_id} != {first_id}
        replaced, model = run("second = live.LiveView(h); second", ask="second.widget.model_id")
        updates = {c["transient"]["display_id"]: c["data"] for kind, c in replaced if kind == "update_display_data"}
        assert set(updates) == {first_id, loop_id}  # every output of the earlier view
        assert all("replaced by a newer LiveView" in d["text/plain"] and not widget_of({"data": d})
                   for d in updates.values())  # fmt: skip
        assert [widget_of(c) for kind, c in replaced if kind == "display_data"] == [model.strip("'")]
        assert run("", ask="[v in openviews.OPEN for v in (first, second)]")[1] == "[False, True]"
        run("other = live.LiveView(History()); other")  # another history: not a replacement
        run("twin = live.LiveView(h); display(twin); triplet = live.LiveView(h); display(triplet)")  # in one run
        ask = "[v in openviews.OPEN for v in (second, other, twin, triplet)]"
        assert run("", ask=ask)[1] == "[False, True, True, True]"  # a later run's views replaced second
        run("a = live.LiveView(h); a", "A")  # with a cell id: cells tell views apart, as above
        run("b = live.LiveView(h); b", "B")
        assert run("", "C", "[v in openviews.OPEN for v in (a, b)]")[1] == "[True, True]"


def test_a_live_views_metric_panel_is_titled_by_the_names_catalogue_as_overview_and_compare_are():
    """``LiveView(h, metrics=("entropy",))`` titled its panel "entropy", ``overview`` and ``compare`` "entropy (nats per
    token)": one figure under two names."""
    metrics = ("entropy", "completions/distinct_mean", "my_score")
    view = LiveView(hand_history([1.0], norms=[0.3]), metrics=metrics, every=0)
    try:
        titles = [view.panels[name].ax.title.get_text() for name in metrics]
        assert titles == ["entropy (nats per token)", "distinct completions per group", "my_score"]
    finally:
        view.close()
