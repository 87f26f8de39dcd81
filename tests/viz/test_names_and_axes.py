"""Names drawn as the live tables show them, a log axis over a figure near the largest float, a legend kept on the
user's own figure, and a live view whose widget was closed: read back from the figures and widgets drawn."""

import io
import os
import re
import time

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import findfont, get_font

from rlnb.history import History
from rlnb.viz import plots
from rlnb.viz.live import LiveView
from tests.support.histories import hand_history
from tests.support.kernels import kernel

ODD = "a\x00b\n"
"""A name with a NUL and a line break: drawn raw, a box and a line break in the legend."""
SHOWN = "a\\x00b\\n"


def runs(names, steps=5):
    return pd.DataFrame([{"run": n, "seed": 0, "step": t, "loss": 1.0 / t + i} for i, n in enumerate(names)
                         for t in range(1, steps + 1)])  # fmt: skip


def drawn_texts(figure):
    FigureCanvasAgg(figure).draw()  # drawn, so what is read back is what was rendered
    return [t.get_text() for t in figure.findobj(lambda a: hasattr(a, "get_text") and a.get_text())]


def test_control_characters_in_run_and_metric_names_are_drawn_as_escapes():
    """A run or a metric named ``"a\\x00b\\n"`` was drawn raw (a box, a line break) in legends and titles, where the
    live tables showed ``a\\x00b\\n``."""
    ax = plots.compare(runs([ODD, "main"]))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [SHOWN, "main"]
    h = History()
    for step in (1, 2):
        h.log(step, **{ODD: 0.5 * step})
    ax = plots.metric(h, ODD)
    assert ax.get_title() == SHOWN and ax.get_ylabel() == SHOWN
    compared = plots.compare(pd.DataFrame({"run": ["r", "r"], "seed": 0, "step": [1, 2], ODD: [1.0, 2.0]}), y=ODD)
    assert compared.get_title() == f"{SHOWN} by run" and compared.get_ylabel() == SHOWN
    figure = plots.overview(h, metrics=[ODD])
    texts = drawn_texts(figure)
    assert SHOWN in texts and not any("\x00" in t for t in texts)
    view = LiveView(h, metrics=[ODD], every=0)
    try:
        panel = view.panels[ODD]
        assert panel.ax.get_title() == SHOWN and view.error is None
        assert f"{SHOWN}</th>" in view.steps_table.value
    finally:
        view.close()


@pytest.mark.parametrize("huge", [1.7e308, 1e200])
@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_log_axis_over_a_figure_near_the_largest_float_is_drawn(huge):
    """``ax = plots.loss(h); ax.set_yscale("log")`` with a loss near 1.7e308: the axis kept the top the linear one
    was given (1e300) and the log locator ticked a decade past it, at inf: ``OverflowError`` when drawn."""
    h = hand_history([1.0, huge, 0.5])
    for ax in (plots.loss(h), plots.metric(pd.DataFrame({"step": [1, 2, 3], "x": [2.0, huge, 0.5]}), "x")):
        ax.set_yscale("log")
        for size in ((6, 3.5), (3, 1)):  # a small figure ticks fewest decades, the stride the widest
            ax.figure.set_size_inches(size)
            ax.figure.savefig(io.BytesIO(), format="png")
            assert np.isfinite(ax.yaxis.get_majorticklocs()).all()
    h = History()
    view = LiveView(h, metrics=("big",), every=0)
    try:
        for i, v in enumerate([1.0, huge, 0.5]):
            h.log(i + 1, big=v)
        view.log_toggle.value = True  # the live view's "log y"
        view.refresh()
        assert view.panels["big"].ax.get_yscale() == "log" and view.error is None
    finally:
        view.close()


def legend_box(ax):
    canvas = FigureCanvasAgg(ax.figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    return ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer), ax.figure.bbox


def within(inner, outer, slack=1.0):
    return (outer.x0 - slack <= inner.x0 and inner.x1 <= outer.x1 + slack and outer.y0 - slack <= inner.y0
            and inner.y1 <= outer.y1 + slack)  # fmt: skip


@pytest.mark.parametrize("count, length", [(8, 6), (30, 50), (70, 90)])
@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_comparison_on_the_users_own_axes_keeps_its_legend_inside_them(count, length):
    """``compare(..., ax=my_ax)`` with more than six runs put the legend right of the user's axes, on a figure it
    may not resize: on the right of two panels it ran off the figure (``savefig(bbox_inches="tight")`` showed it)."""
    config = "lr=3e-4 rank=16 warmup=100 config "[: length - 3].ljust(length - 3, "x")
    names = [f"{i:02d} {config}" for i in range(count)]
    figure = Figure(figsize=(9, 3.5), layout="constrained")
    left, right = figure.subplots(1, 2)
    ax = plots.compare(runs(names), ax=right)
    assert ax is right and tuple(figure.get_size_inches()) == (9, 3.5)
    box, frame, page = legend_box(ax)
    assert within(box, frame) and within(box, page)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(texts) == count and len(set(texts)) == count  # every run listed, told apart
    for name, text in zip(names, texts, strict=True):
        head, _, tail = text.partition("…")
        assert text == name if count == 8 else name.startswith(head) and name.endswith(tail) and head[:2] == name[:2]


def test_a_live_view_whose_widget_was_closed_stops_following_its_history():
    """``v = LiveView(h); v.widget.close()``: the view stayed subscribed and redrew at every change for the kernel's
    life, though nothing could show it."""
    from rlnb.viz import openviews

    h = History()
    closed = LiveView(h, every=0.01)
    watching = LiveView(h, every=0.01)
    closed.widget.close()
    before = closed.redraws, watching.redraws
    try:
        h.log(1, reward=0.5)
        deadline = time.monotonic() + 30
        while watching.redraws == before[1] and time.monotonic() < deadline:  # the open one's timer has drawn
            time.sleep(0.01)
        assert watching.redraws > before[1] and closed.redraws == before[0]
        assert closed not in openviews.OPEN and watching in openviews.OPEN  # nor closed again at exit
    finally:
        watching.close()


@pytest.mark.slow  # an IPython kernel
def test_running_a_cell_again_replaces_its_live_view_and_closing_every_widget_closes_every_view(tmp_path):
    """Running ``view = LiveView(h); view`` five times left five views redrawing at every change: the front end
    drops the old output's widget view, and ipywidgets says nothing. The cell id the front end sends with each run
    (JupyterLab, Notebook 7, VS Code) tells a run again of that cell from another cell."""
    with kernel(tmp_path) as run:
        run("first = live.LiveView(h)", "A")
        run("again = live.LiveView(h); twin = live.LiveView(h)", "A")  # two views of one run both stay
        run("other = live.LiveView(h)", "B")
        run("other_history = live.LiveView(History())", "A")  # another history: not a replacement
        ask = "[v in openviews.OPEN for v in (first, again, twin, other, other_history)]"
        assert run("", "C", ask)[1] == "[False, True, True, True, True]"
        run("import ipywidgets; ipywidgets.Widget.close_all()", "D")
        assert run("", "C", "len(openviews.OPEN)")[1] == "0"


CJK, WATCH = "学习率 🚀", "run ⌚"
"""Names DejaVu Sans (matplotlib's default font) has no glyph for: CJK and an emoji, and U+231A, which matplotlib's
own STIXGeneral has."""


def unescaped(text):
    return re.sub(r"\\u([0-9a-f]{4})|\\U([0-9a-f]{8})", lambda m: chr(int(m.group(1) or m.group(2), 16)), text)


def test_cjk_and_emoji_names_are_drawn_in_a_font_that_has_them_or_as_escapes_never_as_boxes():
    """A run or a metric named in CJK or with an emoji was drawn as empty boxes (DejaVu Sans has neither), with
    "Glyph ... missing from font(s)" at each draw (an error here: pytest turns warnings into errors). With only
    matplotlib's own fonts, U+231A is drawn in STIXGeneral and the CJK and the emoji as their escapes; where a font
    that has them is installed, in that font. Either way nothing is lost: the escapes read back as the name."""
    assert 0x231A not in get_font(findfont("DejaVu Sans")).get_charmap()  # else this test proves nothing
    comparison = plots.compare(runs([CJK, WATCH]))
    legend = [t.get_text() for t in comparison.get_legend().get_texts()]
    assert legend[1] == WATCH and [unescaped(t) for t in legend] == [CJK, WATCH]
    metric = plots.metric(pd.DataFrame({"step": [1, 2], CJK: [0.1, 0.2]}), CJK)
    assert unescaped(metric.get_title()) == CJK and unescaped(metric.get_ylabel()) == CJK
    h = History()
    view = LiveView(h, metrics=(CJK, WATCH), every=0, loss=False, learning_rate=False)  # 272 px: the titles fit
    try:
        assert unescaped(view.panels[CJK].ax.get_title()) == CJK and view.panels[WATCH].ax.get_title() == WATCH
        assert unescaped(view.panels[CJK].note.get_text()) == f"no '{CJK}' logged yet"
        for figure in (comparison.figure, metric.figure):
            FigureCanvasAgg(figure).print_png(io.BytesIO())  # warned "Glyph 23398 ... missing" before
        h.log(1, **{CJK: 0.5, WATCH: 0.25})
        view.refresh()  # every panel drawn again: a missing glyph warns, and the failure is raised here
        assert view.error is None and view.panels[CJK].note.get_text() == ""
    finally:
        view.close()


def test_a_font_file_freetype_cannot_read_is_never_the_fallback(tmp_path, monkeypatch):
    """Looking for a font with a character the default lacks reads every installed font: a broken one (a truncated
    download in ~/.fonts) raised from FreeType, and the plot of a run named in CJK failed."""
    from matplotlib import font_manager

    from rlnb.viz import glyphs

    broken = tmp_path / "broken.ttf"
    broken.write_bytes(b"not a font")
    entry = font_manager.FontEntry(fname=str(broken), name="Broken CJK")
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [entry, *font_manager.fontManager.ttflist])
    glyphs._fallback.cache_clear()  # else a character looked up before is answered from before the broken font
    try:
        ax = plots.metric(pd.DataFrame({"step": [1, 2], "语": [0.1, 0.2]}), "语")
        assert unescaped(ax.get_title()) == "语"
    finally:
        glyphs._fallback.cache_clear()


@pytest.mark.parametrize(
    ("families", "drawn_in"),
    [
        (("no such family",), ("no such family", "STIXGeneral")),
        (("no such family", "DejaVu Sans"), ("no such family", "DejaVu Sans", "STIXGeneral")),
        (("DejaVu Sans", "no such family", "STIXGeneral"), ("DejaVu Sans", "no such family", "STIXGeneral")),
    ],
    ids=["only it", "before DejaVu", "between two"],
)
def test_a_family_that_is_not_installed_is_passed_over_as_matplotlib_draws_it(families, drawn_in):
    """A text's families are looked up one by one, as matplotlib draws them: one not installed is passed over, and
    where none is, the text is drawn in the default font (DejaVu Sans), which has ``é`` but not U+231A (drawn in
    STIXGeneral). Without that default, ``é`` in a missing family took a fallback font of its own."""
    from rlnb.viz import glyphs

    assert glyphs.as_drawn("é", families[:1]) == ("é", families[:1])
    assert glyphs.as_drawn("é\u231a", families) == ("é\u231a", drawn_in)
    figure = Figure(figsize=(2, 1))
    text = figure.text(0.1, 0.5, "é\u231a", family=list(families))
    glyphs.drawable(text)
    FigureCanvasAgg(figure).print_png(io.BytesIO())  # a glyph missing from the fonts drawn in warns: an error here
    text.set_fontfamily(list(families))
    glyphs.drawable(text, "new \u231a")  # new words (a wrap's, a cut's), written as drawn in the text's fonts
    assert (text.get_text(), tuple(text.get_fontproperties().get_family())) == ("new \u231a", drawn_in)


@pytest.mark.parametrize("own", [False, True])
def test_a_comparison_legend_is_fitted_to_its_room_as_drawn_with_its_names_escapes(own):
    """A legend's names were fitted to their room before the CJK in them became escapes (``\\u5b66``: 6 characters
    for 1), so a long CJK name was measured at a sixth of its drawn width and ran out of the legend's room: off the
    user's axes, or off the figure ``compare`` made for it. Names are now measured as they are drawn."""
    names = [f"{i:02d} " + "学习率" * 12 for i in range(8)]
    figure = Figure(figsize=(9, 3.5), layout="constrained")
    ax = plots.compare(runs(names), ax=None if own else figure.subplots(1, 2)[1])
    box, frame, page = legend_box(ax)
    assert within(box, page) and (own or within(box, frame))
    for name, text in zip(names, [t.get_text() for t in ax.get_legend().get_texts()], strict=True):
        head, _, tail = unescaped(text).partition("…")
        assert name.startswith(head) and name.endswith(tail) and head[:2] == name[:2]


def test_a_long_cjk_title_is_cut_between_characters_and_fits_as_drawn():
    """A title was cut to its room after its CJK had become escapes: cut in the middle of one (``学习\\…87``), it
    read back as neither the name's start nor its end. It is now cut as given, measured as drawn."""
    from rlnb.viz.livefig import Panel

    name = "学习率" * 8
    static = plots.metric(pd.DataFrame({"step": [1, 2], name: [1.0, 2.0]}), name)
    for ax in (static, Panel(name).ax, Panel(name, per_row=4).ax):
        canvas = FigureCanvasAgg(ax.figure)
        canvas.draw()
        box, page = ax.title.get_window_extent(canvas.get_renderer()), ax.figure.bbox
        head, tail = unescaped(ax.get_title()).split("…")
        assert name.startswith(head) and name.endswith(tail) and head and tail, ax.get_title()
        assert page.x0 <= box.x0 and box.x1 <= page.x1
