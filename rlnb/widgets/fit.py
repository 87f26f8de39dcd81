"""A RunPanel's layout, and how it fits a narrow column: JupyterLab at 125% zoom on a 1366×768 laptop, its file
browser open, gives a cell's output 661 px, and a split screen or a phone less. Its button row wraps instead of
cutting its buttons' labels, and its live view's plots share a row, scaled alike, down to ``SHRINK`` of their size
before they stack: at 661 px the reward and gradient-norm plots (320 + 432 px) stacked, and the panel was 725 px tall,
848 px during a run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as W

from rlnb.widgets.controls import IN_ROW

SHRINK = 0.85
"""The smallest scale at which the live view's plots share a row (their text stays readable); narrower, they stack."""


def panel_widget(panel: Any) -> W.VBox:
    """A RunPanel's widget, top down: its buttons and progress, its status and schedule lines, its warning, the
    builder, the live view (its plots sharing a row) and the hidden output that gives the focus back."""
    row = button_row([panel.step_button, panel.run_button, panel.n, panel.stop_button, panel.progress])
    lines = W.HBox([panel.status, panel.schedule_line], layout=W.Layout(flex_flow="row wrap", grid_gap="0 24px"))
    widget = W.VBox([row, lines, panel.warning, panel.builder.widget, panel.live.widget, panel.focus_back.widget])
    widget.add_class("rlnb-run-panel")
    plots_share_a_row(panel.live.plots)
    return widget


def button_row(children: Sequence[W.Widget]) -> W.HBox:
    """Buttons as wide as their labels, and a row that wraps: in a 400 px column the row squeezed them ("R…")."""
    for child in children:
        if isinstance(child, W.Button):
            child.layout.width = "auto"
    return W.HBox(list(children), layout=W.Layout(align_items="center", flex_flow="row wrap"))


def plots_share_a_row(plots: W.Box) -> None:
    """Size the plots in ``plots`` (a live view's row of ``Image``s, each as wide as its figure), and those it gains
    later (a view of every figure adds a plot as its figure appears), to share a row as ``SHRINK`` says."""
    _fit(plots.children)
    plots.observe(lambda change: _fit(change["new"]), names="children")


def _fit(images: Sequence[Any]) -> None:
    """Each plot grows in proportion to its width (so plots in a row scale alike and keep one height), from
    ``SHRINK`` of it (narrower, it wraps onto a row of its own) to all of it, never past its row."""
    for image in images:
        width = str(image.layout.width or "")
        if image.layout.flex or not width.endswith("px"):
            continue  # sized already, or not a plot the live view sized
        px = float(width.removesuffix("px"))
        image.layout.flex = f"{px:g} 1 0px"
        image.layout.min_width = f"min({px * SHRINK:.0f}px, {IN_ROW})"
        image.layout.max_width = f"min({px:g}px, {IN_ROW})"
        image.layout.height = "auto"  # its figure's proportions at any width
        image.layout.align_self = "flex-start"
