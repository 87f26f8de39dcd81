"""How a live view takes its place in a notebook: its size on a laptop's screen, read from the PNGs it draws."""

import io
import os

os.environ.setdefault("MPLBACKEND", "Agg")

from PIL import Image

from rlnb.history import History
from rlnb.viz.live import LiveView
from tests.viz.test_plots import hand_history

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
