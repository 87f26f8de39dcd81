"""What a hostile user gave the plots and the live view: many runs on one comparison, names matplotlib reads
its own way, figures that are not finite. Checked on the figure objects (lines, legend, layout)."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba

from rlnb.history import History
from rlnb.viz import plots
from rlnb.viz.live import LiveView
from tests.support.histories import hand_history, optim_metrics


def runs(names, steps=50):
    return pd.DataFrame([{"run": n, "seed": 0, "step": t, "loss": 1.0 / t + i} for i, n in enumerate(names)
                         for t in range(1, steps + 1)])  # fmt: skip


def test_thirty_runs_are_thirty_distinct_lines_in_a_legend_beside_the_axes():
    """30 runs were drawn in 10 colours (three lines to a colour, the legend unable to tell them apart) and their
    legend, inside a 3.5-inch figure, was taller than it: the axes were squashed to a sliver."""
    names = [f"lr={i}e-4 rank=16 warmup=100 seed-averaged config {i}" for i in range(30)]
    ax = plots.compare(runs(names))
    styles = {(to_rgba(ln.get_color()), ln.get_marker()) for ln in ax.lines}
    assert len(ax.lines) == len(styles) == 30
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == names
    fig = ax.figure
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    box, frame, page = legend.get_window_extent(renderer), ax.get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1  # all on the page
    assert box.x0 >= frame.x1  # beside the lines, not over them
    assert frame.height >= 0.5 * page.height and frame.width >= 0.4 * page.width


def test_a_run_named_with_a_leading_underscore_is_in_the_legend():
    """matplotlib leaves a label starting with ``_`` out of a legend: the run ``_scratch`` was drawn, unnamed."""
    ax = plots.compare(runs(["_scratch", "main"]))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["_scratch", "main"]


def test_a_live_view_refuses_a_metric_named_with_a_lone_surrogate():
    """``metrics=["acc\\ud800"]`` failed inside matplotlib (``FT2Font.set_text(): incompatible function arguments``)
    drawing the panel's title; ``history.log`` refuses such a name, so the panel could never have drawn a point."""
    with pytest.raises(ValueError, match=r"LiveView: the metric name 'acc\\ud800' holds a lone surrogate"):
        LiveView(History(), metrics=["acc\ud800"])


def test_an_infinite_figure_is_marked_on_the_frame_not_left_a_gap_like_a_missing_one():
    """A step whose loss was +inf (diverged) was a gap, as for a step that reported none, and a run all +inf was
    an empty axes without a word; its EMA drew the value before the infinity at that step."""
    inf = float("inf")
    steps = pd.DataFrame({"step": range(1, 8), "loss": [1.0, 0.8, inf, 0.5, -inf, inf, float("nan")]})
    ax = plots.loss(steps, ema=0.5)
    raw, smoothed, top, bottom = ax.lines
    assert top.get_transform() == bottom.get_transform() == ax.get_xaxis_transform()  # x in steps, y on the frame
    assert top.get_xydata().tolist() == [[3, 1], [6, 1]] and bottom.get_xydata().tolist() == [[5, 0]]
    assert (top.get_marker(), bottom.get_marker()) == ("^", "v")
    assert [t.get_text() for t in ax.get_legend().get_texts()][2:] == [
        "loss +inf (2 steps, on the frame)", "loss -inf (1 step, on the frame)"]  # fmt: skip
    ema = smoothed.get_ydata()
    assert np.isnan(ema[[2, 4, 5, 6]]).all()  # gaps
    assert ema[3] == 0.5 * 0.9 + 0.5 * 0.5  # the EMA skips the infinity, as the live view's
    alone = plots.loss(pd.DataFrame({"step": [1, 2], "loss": [inf, inf]}))
    assert [t.get_text() for t in alone.get_legend().get_texts()] == ["loss", "loss +inf (2 steps, on the frame)"]


def test_a_live_panel_of_a_constant_small_figure_is_scaled_to_it():
    """A constant learning rate of 1e-5 was drawn on an axis of -0.006 to 0.006 (a flat span of at least 0.05):
    the line sat on the zero tick, the panel saying the rate was 0 and the axis that it could be negative."""
    from rlnb.viz.livefig import Panel

    for value in (1e-5, -3e-7, 1e4):
        panel = Panel("learning rate")
        panel.set_limits(10, value, value)
        low, high = panel.ax.get_ylim()
        assert low < value < high and high - low <= abs(value) and low * high > 0  # the sign of the value, around it
    panel = Panel("reward")
    panel.set_limits(10, 0.0, 0.0)
    assert panel.ax.get_ylim()[0] < 0 < panel.ax.get_ylim()[1]


def test_a_long_figure_name_is_cut_in_the_middle_to_fit_its_title_not_clipped_at_the_figure_edges():
    """A 70-character metric name ran off both edges of its panel's title, clipped with nothing to say so."""
    from rlnb.viz.livefig import Panel

    name = "completions/mean length over the held out set, per group of 8 (tokens)"
    static = plots.metric(pd.DataFrame({"step": [1, 2], name: [1.0, 2.0]}), name)
    for ax in (static, Panel(name).ax, Panel(name, legend=True).ax):
        canvas = FigureCanvasAgg(ax.figure)
        canvas.draw()
        shown, box, page = ax.get_title(), ax.title.get_window_extent(canvas.get_renderer()), ax.figure.bbox
        head, tail = shown.split("…")
        assert name.startswith(head) and name.endswith(tail) and len(head) >= 10 and len(tail) >= 10
        assert page.x0 <= box.x0 and box.x1 <= page.x1
    assert plots.metric(pd.DataFrame({"step": [1], "reward": [1.0]}), "reward").get_title() == "reward"


def test_a_muon_run_without_partial_norms_lists_no_empty_lines_in_the_live_legend():
    """A Muon run whose backend reports the global norm alone had "Muon matrices" and "AdamW params" in the
    gradient norm's legend, lines with no point: the legend said there was something to read there."""
    h = hand_history([1.0, 0.5], norms=[1.0, 0.8], config={"optimizer": "muon"})
    view = LiveView(h, every=0)
    panel = view.panels["grad_norm"]
    assert [t.get_text() for t in panel.ax.get_legend().get_texts()] == ["global", "clip threshold"]
    view.ema_toggle.value = True
    assert [t.get_text() for t in panel.ax.get_legend().get_texts()] == ["global (EMA 0.9)", "clip threshold"]
    parts = {"grad_norm/muon": 0.7, "grad_norm/adam": 0.2}
    muon = hand_history([1.0], norms=[1.0], config={"optimizer": "muon"}, metrics=lambda gn: optim_metrics(gn, **parts))
    view.close()
    view = LiveView(muon, every=0)
    texts = [t.get_text() for t in view.panels["grad_norm"].ax.get_legend().get_texts()]
    assert texts == ["global", "Muon matrices", "AdamW params", "clip threshold"]
    view.close()


def test_a_seed_at_inf_is_marked_on_a_comparison():
    """One seed's loss at +inf made its group's mean +inf at that step: a gap, and the band left it out."""
    inf = float("inf")
    rows = [{"run": "a", "seed": s, "step": t, "loss": inf if (s, t) == (1, 3) else 1.0} for s in (0, 1)
            for t in range(1, 6)]  # fmt: skip
    ax = plots.compare(pd.DataFrame(rows))
    marked = ax.lines[-1]
    assert marked.get_xydata().tolist() == [[3, 1]] and marked.get_transform() == ax.get_xaxis_transform()
    named = ["a (2 seeds)", "a (2 seeds) +inf (1 step, on the frame)"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == named


EXIT_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.support.histories import T0, add, hand_history, optim_metrics
from rlnb import wire
from rlnb.viz.live import LiveView

h = hand_history([1.0], norms=[1.0])
view = LiveView(h, every=0)
draw, done = view._draw_panel, Path({done!r})

def slow_draw(name):
    Path({started!r}).touch()
    time.sleep(1.0)
    draw(name)
    done.write_text("drawn")

view._draw_panel = slow_draw
add(h, "forward-backward", at=T0 + 2, output=wire.ForwardBackwardResult(loss=0.5), step=1)
add(h, "optim-step", at=T0 + 3, output=wire.OptimStepResult(step=2, metrics=optim_metrics(1.0)), step=1)
deadline = time.monotonic() + 60
while not Path({started!r}).exists() and time.monotonic() < deadline:
    time.sleep(0.01)
"""


@pytest.mark.slow  # a Python process
def test_interpreter_exit_waits_for_an_open_views_redraw(tmp_path):
    """A view never closed (its cell run again, a script's end) was still drawing on its timer thread while the
    interpreter exited: the process aborted now and then (``terminate called without an active exception``)."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).parents[2])
    done, started = tmp_path / "done", tmp_path / "started"
    script = EXIT_SCRIPT.format(root=root, done=str(done), started=str(started))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MPLBACKEND": "Agg"})  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert started.exists() and done.read_text() == "drawn"  # exit waited for the redraw to end


def test_a_live_view_marks_an_infinite_figure_on_the_frame_as_the_static_plots_do():
    """The static plots marked a +inf or -inf step on the frame and counted it in the legend; the live view still
    left a gap there, as for a step that reported nothing, and a panel all inf said "no 'ppl' logged yet"."""
    inf = float("inf")
    values = [10.0, inf, 12.0, -inf, inf, 11.0]
    h = hand_history([1.0, inf, 0.5])
    for step, v in enumerate(values, 1):
        h.log(step, ppl=v)
    view = LiveView(h, metrics=("ppl",), every=0)
    try:
        for name, label, static in (
            ("ppl", "ppl", plots.metric(h, "ppl")),
            ("loss", "loss", plots.loss(h)),
        ):
            ax = view.panels[name].ax
            legend = ax.get_legend().get_texts() if ax.get_legend() else []
            live_texts = [t.get_text().replace("\n", " ") for t in legend]  # a long label is broken to fit the panel
            static_texts = [t.get_text() for t in static.get_legend().get_texts()]
            marked = [t for t in static_texts if "inf (" in t]
            assert marked and all(t in live_texts for t in marked), (live_texts, static_texts)
            assert label in live_texts  # the line the marks belong to is named beside them
        ppl = view.panels["ppl"]
        up, down = ppl.lines["ppl:+inf"], ppl.lines["ppl:-inf"]
        assert up.get_visible() and down.get_visible()
        assert up.get_xydata().tolist() == [[2.0, 1.0], [5.0, 1.0]]  # at the top of the frame, at steps 2 and 5
        assert down.get_xydata().tolist() == [[4.0, 0.0]] and down.get_marker() == "v" and up.get_marker() == "^"
        alone = LiveView(History(), metrics=("kl",), every=0)
        alone.history.log(1, kl=inf)
        alone.refresh()
        assert alone.panels["kl"].note.get_text() == ""  # not "no 'kl' logged yet": it was, and it is +inf
        last = alone.panels["kl"].ax.get_legend().get_texts()[-1].get_text()
        assert last.replace("\n", " ") == "kl +inf (1 step, on the frame)"  # broken to fit a narrow panel
        alone.close()
    finally:
        view.close()


STACKED = "a" + "\u0308" * 6 + "\u0323" * 6 + " gain"
"""A metric named with marks stacked above and below its first letter: its title is 26 px tall, two lines' worth."""


def test_a_title_of_stacked_marks_leaves_every_axes_of_the_live_view_as_tall_as_the_others():
    """A title taller than a line lowered its own axes' top: that panel's axes were 9 px shorter than those beside
    it (a metric that appears later, in the automatic mode, too). Each axes is lowered as far as the tallest title
    needs, and each title is drawn above its axes, inside its figure."""
    h = hand_history([1.0, 0.5], norms=[1.0, 0.5])
    view = LiveView(h, metrics=None, every=0)  # automatic: the panel of STACKED is added as it is logged
    try:
        h.log(1, reward=0.5, **{STACKED: 0.25})
        view.refresh()
        assert {"reward", STACKED} <= set(view.panels) and view.error is None
        axes = {name: panel.ax.get_window_extent() for name, panel in view.panels.items()}
        assert len({(round(a.y0, 6), round(a.y1, 6)) for a in axes.values()}) == 1, {
            n: a.extents.round(1) for n, a in axes.items()
        }
        for name, panel in view.panels.items():
            title = panel.ax.title.get_window_extent(panel.canvas.get_renderer())
            assert axes[name].y1 <= title.y0 and title.y1 <= panel.figure.bbox.y1, name
        assert axes["loss"].y1 < 0.87 * 208 - 9  # lowered under STACKED's title, the loss panel drawn before it
    finally:
        view.close()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_exported_table_read_back_by_pandas_plots_as_the_history_does(tmp_path, fmt):
    """``history.to_csv`` / ``to_parquet`` read back with ``pd.read_csv`` / ``read_parquet`` (the demo's history.csv,
    plotted a day later): the CSV's times are text, so every plot of it raised pandas' bare ``TypeError: operation
    'sub' not supported for dtype 'str'``; the ``params`` column is JSON text in both, so the loss of a forward-only
    evaluation was summed into its step's (read twice over). Both draw what the History draws."""
    import rlnb
    from rlnb import samples
    from rlnb.testing import FakeBackend

    s = rlnb.Session(FakeBackend("adam", loss=lambda step: 1.0 + step), runs_dir=tmp_path / "runs", run_id="r")
    for i in range(3):
        s.forward_backward([samples.cross_entropy(list(b"train"))])
        if i == 1:
            s.forward_backward([samples.cross_entropy(list(b"held"))], forward_only=True)
        s.optim_step(rlnb.AdamParams(learning_rate=1e-3))
    s.sample("ab", max_tokens=2)  # no step: its row's step is empty in the file
    s.wait()
    s.close()
    getattr(s.history, f"to_{fmt}")(tmp_path / f"h.{fmt}")
    table = getattr(pd, f"read_{fmt}")(tmp_path / f"h.{fmt}")
    drawn = plots.loss(table).get_lines()[0].get_ydata()
    assert list(drawn) == list(plots.loss(s.history).get_lines()[0].get_ydata()) == [1.0, 2.0, 3.0]
    assert plots.grad_norm(table).get_lines()[0].get_ydata().tolist() == [1.0, 1.0, 1.0]
    bars = plots.timeline(table).collections
    assert [len(c.get_paths()) for c in bars] == [len(c.get_paths()) for c in plots.timeline(s.history).collections]
    FigureCanvasAgg(plots.overview(table)).draw()
    table["submitted_at"] = "yesterday"  # a hand edit: named, not pandas' TypeError
    with pytest.raises(ValueError, match="the operations table's submitted_at column holds no times"):
        plots.timeline(table)


def test_a_comparison_of_one_path_or_one_history_is_refused_naming_what_it_takes(tmp_path):
    """``plots.compare("rlnb-runs")`` (the runs folder, as ``rlnb.runs`` takes it) loaded each character as a run
    folder: ``r is not an rlnb run folder (no ops.jsonl)``, naming neither the argument nor the fix; a History alone
    was iterated into its records. ``rlnb.compare`` said what it takes; ``plots.compare`` now says it too."""
    history = hand_history([1.0, 0.5], [1.0, 1.0])
    for one in (str(tmp_path), tmp_path, history):
        with pytest.raises(TypeError, match=r"compare takes a list of runs .*one run alone: \[run\]"):
            plots.compare(one)
    assert plots.compare([history]).get_lines()[0].get_ydata().tolist() == [1.0, 0.5]


def test_flags_and_times_of_the_wrong_type_are_refused_naming_the_argument():
    """``LiveView(h, loss=None)`` / ``learning_rate="no"`` raised ``TypeError: unsupported operand type(s) for +: 'int'
    and 'NoneType'`` (``"no"`` would have meant yes where it got through), ``plots.timeline(h, now="x")`` ``unsupported
    operand type(s) for -: 'str' and 'float'`` and ``plots.overview(h, metrics=5)`` ``'int' object is not iterable``:
    none named the argument."""
    h = hand_history([1.0, 0.5], [1.0, 1.0])
    for flag in ("loss", "learning_rate"):
        for value in (None, "no", 1):
            with pytest.raises(ValueError, match=f"{flag} must be True or False"):
                LiveView(h, **{flag: value})
    with pytest.raises(ValueError, match=r"now must be a time \(POSIX seconds, as time.time\(\) gives\) or None"):
        plots.timeline(h, now="x")
    with pytest.raises(TypeError, match="metrics must be the names of logged figures"):
        plots.overview(h, metrics=5)
    view = LiveView(h, loss=False, learning_rate=False)
    assert set(view.panels) == {"grad_norm"}
    view.close()


def test_a_figure_named_with_dollars_and_not_logged_yet_is_said_as_written():
    """``plots.metric(h, "$\\nope$ cost")`` or ``LiveView(h, metrics=["$\\nope$ cost"])`` before the figure is logged:
    the note ``no '$\\nope$ cost' logged yet`` is wrapped to its axes, and matplotlib measures a wrapped text's lines
    as TeX whatever ``parse_math`` says: the plot failed when drawn (``ValueError: ParseException``) and the live view
    could not be made. The note is broken into lines here, and drawn as written."""
    h = History(config={})
    h.log(1, acc=0.5)
    for name in ("$\\nope$ cost", "price $5 to $10"):
        ax = plots.metric(h, name)
        FigureCanvasAgg(ax.figure).draw()
        (said,) = [t.get_text() for t in ax.texts]
        assert said.replace("\n", " ") == f"no {name!r} logged yet"
        view = LiveView(h, metrics=[name])
        assert view.error is None and view.panels[name].note.get_text().replace("\n", " ") == said.replace("\n", " ")
        view.close()
