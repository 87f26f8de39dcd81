"""How a RunPanel fits a narrow column, on the Python side (the browser's: tests/widgets/test_browser_narrow.py): the
live view's plots, the ones it adds mid-run included, are sized to share a row, scaled alike."""

import rlnb
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel
from rlnb.widgets.fit import SHRINK


def test_a_plot_the_live_view_adds_mid_run_is_sized_to_share_a_row_like_the_first_ones():
    """A step_fn's panel shows every figure as it appears: a plot added then kept its fixed width, and stacked."""
    session = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(session, step_fn=lambda s, p: {"accuracy": 0.5}, n_steps=1, every=0.05)
    first = set(panel.live.images)
    assert panel.start(1) and panel.join(60)
    assert set(panel.live.images) - first == {"accuracy"}
    for name, image in panel.live.images.items():
        px = float(image.layout.width.removesuffix("px"))  # the figure's width, as the live view set it
        grow, shrink, basis = image.layout.flex.split()
        assert (float(grow), basis) == (px, "0px"), name  # grows in proportion to its width: plots scale alike
        assert image.layout.min_width.startswith(f"min({round(px * SHRINK)}px, "), name
        assert image.layout.max_width.startswith(f"min({px:g}px, ") and image.layout.height == "auto", name
    panel.close()
    session.close()


def test_a_form_made_after_every_widget_was_closed_still_opens():
    """Each field gets a layout of its own: one module-level ``Layout`` was shared by every form's fields, and once
    ``Widget.close_all()`` (or a test's clean-up) closed it, every later form raised AttributeError as it opened."""
    import ipywidgets as W

    first = rlnb.widgets.OptimizerBuilder()
    W.Widget.close_all()
    second = rlnb.widgets.OptimizerBuilder()
    try:
        assert second.widget.comm is not None
        fields = [c for c in second.adam.values() if isinstance(c, W.Text)]  # every field but the rate
        assert fields and len({id(c.layout) for c in fields}) == len(fields)
    finally:
        second.close()
        first.close()
