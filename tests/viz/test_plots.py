"""Plots and the live view, checked on the figure objects (lines, collections, texts), not pixels; histories
are built by hand or recorded from FakeBackend sessions, except where the engine's own figures are drawn (the
Muon norms of a live session, an RL step's metrics)."""

import html
import math
import os
import re
import threading
import time

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import rlnb
from rlnb import samples, wire
from rlnb.engine.backend import LocalBackend
from rlnb.history import NA_NO_GRAD_NORM, History
from rlnb.testing import FakeBackend
from rlnb.viz import plots
from rlnb.viz.live import LiveView
from tests.support.histories import COMPLETED, FAILED, PENDING, RUNNING, T0, add, hand_history, optim_metrics

NON_FINITE = wire.OperationErrorCode.NON_FINITE_LOSS


@pytest.fixture(scope="module")
def adam_history(tmp_path_factory):
    """A recorded session: 4 steps, clipping off at step 3, a reward logged per step."""
    s = rlnb.Session(FakeBackend("adam"), runs_dir=tmp_path_factory.mktemp("runs"), run_id="p")
    for i in range(4):
        s.forward_backward([samples.cross_entropy(list(b"plots, plots"))])
        s.optim_step(rlnb.AdamParams(learning_rate=1e-3 * (i + 1), grad_clip_norm=0 if i == 2 else 1.0))
        s.history.log(i + 1, reward=0.1 * (i + 1))
    s.wait()
    s.close()
    return s.history


def xy(line):
    return line.get_xydata()


def test_lines_carry_the_steps_table(adam_history):
    steps = adam_history.steps
    x = steps.step.to_numpy(float)
    (line,) = plots.loss(adam_history).lines
    np.testing.assert_array_equal(xy(line), np.c_[x, steps.loss])
    ax = plots.grad_norm(adam_history)
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert set(lines) == {"global", "clip threshold"}  # an Adam run: no Muon norms
    np.testing.assert_array_equal(xy(lines["global"]), np.c_[x, steps.grad_norm])
    clip = xy(lines["clip threshold"])
    assert lines["clip threshold"].get_linestyle() == "--"
    np.testing.assert_array_equal(clip[:, 1], [1.0, 1.0, np.nan, 1.0])  # 0 = off: no threshold drawn there
    (lr,) = plots.learning_rate(adam_history).lines
    np.testing.assert_allclose(xy(lr), np.c_[x, [1e-3, 2e-3, 3e-3, 4e-3]])
    (reward,) = plots.metric(adam_history, "reward").lines
    np.testing.assert_allclose(xy(reward), np.c_[x, [0.1, 0.2, 0.3, 0.4]])
    # The same from the DataFrames.
    np.testing.assert_array_equal(xy(plots.loss(adam_history.df).lines[0]), xy(line))
    np.testing.assert_array_equal(xy(plots.loss(steps).lines[0]), xy(line))


def test_overview_is_one_figure_of_panels(adam_history):
    fig = plots.overview(adam_history, metrics=("reward", "missing"))
    assert isinstance(fig, Figure)
    assert [ax.get_title() for ax in fig.axes] == ["reward", "missing", "gradient norm (pre-clip)", "loss"]
    assert [t.get_text() for t in fig.axes[1].texts] == ["no 'missing' logged yet"]
    plain = hand_history([1.0, 0.5], norms=[1.0, 1.0])  # no reward: loss first, as for any supervised run
    assert [ax.get_title() for ax in plots.overview(plain).axes] == ["loss", "gradient norm (pre-clip)"]


def rl_history():
    """Three steps with the RL metrics rl_step logs, and eval accuracy logged at steps 0 and 3."""
    h = hand_history([1e-9, -2e-9, 5e-10], norms=[1.0, 0.5, 0.25])
    h.log(0, **{"eval/accuracy": 0.1})
    for step in (1, 2, 3):
        h.log(
            step,
            reward=0.2 * step,
            reward_std=0.1,
            frac_reward_zero_std=0.5 / step,
            entropy=5.0 - step,
            **{
                "completions/mean_length": 6.0 + step,
                "completions/min_length": 2.0,
                "completions/max_length": 8.0,
                "completions/clipped_ratio": 0.25,
                "completions/distinct_mean": 8.0 - step,
                "clip_ratio/low_mean": 0.0,
                "clip_ratio/high_mean": 0.0,
                "clip_ratio/region_mean": 0.0,
            },
        )
    h.log(3, **{"eval/accuracy": 0.6})
    return h


def test_an_rl_overview_leads_with_reward_and_eval_accuracy_and_puts_the_grpo_loss_last():
    h = rl_history()
    fig = plots.overview(h, metrics=("reward", "entropy", "mine"))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "reward and eval accuracy",
        "entropy (nats per token)",
        "reward spread",
        "distinct completions per group",
        "completion length (tokens)",
        "clip fractions",
        "mine",
        "gradient norm (pre-clip)",
        "GRPO loss (secondary)",
    ]  # no KL panel: no kl logged
    lines = {ln.get_label(): xy(ln) for ln in fig.axes[0].lines}
    np.testing.assert_allclose(lines["reward (train)"], [[1, 0.2], [2, 0.4], [3, 0.6]])
    np.testing.assert_allclose(lines["eval accuracy (held out)"], [[0, 0.1], [3, 0.6]])  # its own steps, no gaps
    assert [t.get_text() for t in fig.axes[-1].texts][0].startswith("≈0 by construction")
    length = fig.axes[4]
    assert len(length.collections) == 1  # the min-max band around the mean
    spread = {ln.get_label() for ln in fig.axes[2].lines}
    assert spread == {"reward std", "groups with zero reward std"}
    h.log(3, kl=0.02)
    assert "KL to the reference" in [ax.get_title() for ax in plots.overview(h).axes]


def test_ema_draws_raw_faint_and_smoothed_bold(adam_history):
    loss = adam_history.steps.loss.to_numpy()
    raw, smoothed = plots.loss(adam_history, ema=0.9).lines
    expected = [loss[0]]
    for v in loss[1:]:
        expected.append(0.9 * expected[-1] + 0.1 * v)
    np.testing.assert_array_equal(xy(raw)[:, 1], loss)
    np.testing.assert_allclose(xy(smoothed)[:, 1], expected, rtol=1e-12)
    assert not np.allclose(xy(smoothed)[:, 1], loss)
    assert raw.get_alpha() < 1 and smoothed.get_linewidth() > raw.get_linewidth()
    with pytest.raises(ValueError, match="ema"):
        plots.loss(adam_history, ema=1.0)


def test_muon_runs_draw_both_partial_norms():
    def muon(gn):
        return optim_metrics(gn, **{"grad_norm/muon": gn * 0.6, "grad_norm/adam": gn * 0.8})

    h = hand_history([3.0, 2.0, 1.0], norms=[5.0, 4.0, 3.0], metrics=muon)
    lines = {ln.get_label(): ln for ln in plots.grad_norm(h).lines}
    assert set(lines) == {"global", "Muon matrices", "AdamW params", "clip threshold"}
    np.testing.assert_allclose(xy(lines["Muon matrices"]), [[1, 3.0], [2, 2.4], [3, 1.8]])
    np.testing.assert_allclose(xy(lines["AdamW params"]), [[1, 4.0], [2, 3.2], [3, 2.4]])


def test_missing_grad_norm_says_why():
    h = hand_history([3.0, 2.0])  # optim-step output carries only `step`, as Together's does
    ax = plots.grad_norm(h)
    assert not ax.lines
    assert [t.get_text() for t in ax.texts] == [NA_NO_GRAD_NORM]
    assert plots.learning_rate(h).texts[0].get_text() == NA_NO_GRAD_NORM
    assert plots.loss(h).lines[0].get_xydata()[:, 1].tolist() == [3.0, 2.0]


def timeline_history():
    h = History()
    add(h, "forward-backward", at=T0, output=wire.ForwardBackwardResult(loss=1.0), step=0)
    add(h, "optim-step", at=T0 + 1, output=wire.OptimStepResult(step=1), step=0)
    add(h, "weights-sync", at=T0 + 2, output=wire.WeightsSyncResult(weights_version=1), step=1)
    add(h, "forward-backward", at=T0 + 3, output=wire.ForwardBackwardResult(loss=1.0), step=1)
    err = wire.OperationError(code=NON_FINITE, message="gradient is NaN")
    add(h, "optim-step", at=T0 + 4, status=FAILED, error=err, step=1)
    add(h, "sample", at=T0 + 5, status=RUNNING, step=1)
    add(h, "weights-sync", at=T0 + 6, status=PENDING, step=1)
    return h


def test_timeline_lanes_bars_and_failures():
    ax = plots.timeline(timeline_history(), now=T0 + 10)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["forward-backward", "optim-step", "weights-sync", "sample"]
    bars = {c.get_label(): c for c in ax.collections if isinstance(c, PolyCollection)}
    assert set(bars) == {"completed", "failed", "running", "pending"}
    for status, coll in bars.items():
        assert tuple(coll.get_facecolor()[0]) == to_rgba(
            plots.STATUS_COLORS[f"TRAINING_OPERATION_STATUS_{status.upper()}"]
        )

    def extent(coll, i=0):
        v = coll.get_paths()[i].vertices
        return v[:, 0].min(), v[:, 0].max(), (v[:, 1].min() + v[:, 1].max()) / 2

    assert len(bars["completed"].get_paths()) == 4
    assert extent(bars["failed"]) == pytest.approx((4.25, 4.75, 1))  # started -> finished, optim-step lane
    assert extent(bars["running"]) == pytest.approx((5.25, 10, 3))  # started -> now
    assert extent(bars["pending"]) == pytest.approx((6, 10, 2))  # submitted -> now
    (marker,) = ax.lines
    assert marker.get_marker() == "X" and marker.get_xydata().tolist() == [[4.75, 1.0]]
    assert [t.get_text() for t in ax.texts] == ["NON_FINITE_LOSS"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["completed", "failed", "running", "pending"]
    assert ax.get_xlabel() == "seconds since the first submission"


def test_timeline_of_a_real_session(adam_history):
    ax = plots.timeline(adam_history)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["forward-backward", "optim-step"]
    (bars,) = ax.collections
    assert bars.get_label() == "completed" and len(bars.get_paths()) == 8 and not ax.lines


def seeded_runs():
    """Two labels x two seeds; loss = base + seed offset per step, so mean and std are known."""
    runs = []
    for label, base in (("adam", 10.0), ("muon", 5.0)):
        for seed, offset in ((1, -1.0), (2, 1.0)):
            runs.append(hand_history([base - i + offset for i in range(4)], config={"label": label, "seed": seed}))
    return runs


def test_compare_draws_mean_and_std_band_per_label():
    frame = rlnb.compare(seeded_runs())
    ax = plots.compare(frame, band="std")
    labels = [ln.get_label() for ln in ax.lines]
    assert labels == ["adam (2 seeds)", "muon (2 seeds)"]
    np.testing.assert_allclose(xy(ax.lines[0]), [[1, 10], [2, 9], [3, 8], [4, 7]])
    np.testing.assert_allclose(xy(ax.lines[1])[:, 1], [5, 4, 3, 2])
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    std = np.std([-1.0, 1.0], ddof=1)
    v = bands[1].get_paths()[0].vertices
    at2 = v[np.isclose(v[:, 0], 2.0), 1]  # muon at step 2: mean 4
    assert at2.min() == pytest.approx(4 - std) and at2.max() == pytest.approx(4 + std)
    # A list of histories gives the same figure; a single seed gets a line and no band.
    np.testing.assert_array_equal(xy(plots.compare(seeded_runs(), band="std").lines[0]), xy(ax.lines[0]))
    one = plots.compare(seeded_runs()[:1], y="loss")
    assert [ln.get_label() for ln in one.lines] == ["adam"] and not one.collections
    with pytest.raises(ValueError, match=r"y='reward' is not a column of these runs' steps tables; they have: loss"):
        plots.compare(frame, y="reward")  # these runs logged no reward (a raw KeyError before)


def test_compare_ema_smooths_each_seed_before_averaging():
    frame = rlnb.compare(seeded_runs())
    ax = plots.compare(frame, ema=0.5)
    per_seed = [plots.smooth(g.loss, 0.5) for _, g in frame[frame.run == "adam"].groupby("seed")]
    np.testing.assert_allclose(xy(ax.lines[0])[:, 1], np.mean(per_seed, axis=0))


def test_compare_draws_a_metric_logged_every_few_steps_and_leaves_out_runs_without_it():
    """A metric logged every 3 steps is NaN between: each point sat alone between gaps and no line was drawn
    (an empty axes with a legend); a run that never logged it was an empty line in the legend."""
    rows = [{"run": "a", "seed": s, "step": t, "acc": (0.1 * t + s if t % 3 == 0 else math.nan), "loss": 1.0}
            for s in (0, 1) for t in range(1, 7)]  # fmt: skip
    rows += [{"run": "b", "seed": 0, "step": t, "acc": math.nan, "loss": 2.0} for t in range(1, 7)]
    frame = pd.DataFrame(rows)
    for band in ("auto", "seeds"):
        ax = plots.compare(frame, y="acc", band=band)
        assert ax.lines[0].get_label() == "a (2 seeds)"
        np.testing.assert_allclose(xy(ax.lines[0]), [[3, 0.8], [6, 1.1]])  # mean over the seeds
        assert "b" not in [ln.get_label() for ln in ax.lines] and "all NaN: b" in ax.get_title()
    nothing = plots.compare(frame[frame.run == "b"], y="acc")
    assert [t.get_text() for t in nothing.texts] == [
        "'acc' is NaN at every step of these runs"
    ] and nothing.get_legend() is None


def test_compare_dashes_the_mean_past_the_last_step_every_seed_reached():
    """A seed that ended at step 3 (failed, or stopped): the mean went on as the other seed alone, solid, under
    the legend's "(2 seeds)"."""
    rows = [{"run": "a", "seed": s, "step": t, "loss": float(t + 10 * s)} for s in (0, 1) for t in range(1, 7)
            if s == 0 or t <= 3]  # fmt: skip
    ax = plots.compare(pd.DataFrame(rows), band="minmax")
    (solid, dashed) = ax.lines
    assert solid.get_label() == "a (2 seeds)" and solid.get_linestyle() == "-"
    np.testing.assert_allclose(xy(solid), [[1, 6], [2, 7], [3, 8]])
    assert dashed.get_linestyle() == "--" and dashed.get_label().startswith("_")  # not in the legend
    np.testing.assert_allclose(xy(dashed), [[3, 8], [4, 4], [5, 5], [6, 6]])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a (2 seeds)"]


def test_large_histories_are_decimated_keeping_spikes():
    n = 100_000
    loss = np.linspace(5, 1, n)
    loss[77_777] = 50.0
    loss[33_333] = -3.0
    steps = pd.DataFrame({"step": np.arange(1, n + 1), "loss": loss})
    (line,) = plots.loss(steps).lines
    data = xy(line)
    assert len(data) <= plots.MAX_POINTS
    assert data[:, 1].max() == 50.0 and data[:, 1].min() == -3.0
    assert np.all(np.diff(data[:, 0]) > 0) and data[0, 0] == 1 and data[-1, 0] == n
    h = hand_history([1.0] * 3000, norms=[1.0] * 3000)  # 6,000 completed bars: merged below a pixel
    (bars,) = plots.timeline(h).collections
    spans = [(p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in bars.get_paths()]
    assert spans == [(0.25, 2 * 2999 + 0.75), (1.25, 2 * 2999 + 1.75)]  # one bar per lane
    x, y = plots.decimate([1, 2, 3], [3.0, np.nan, 1.0])
    assert x.tolist() == [1, 2, 3] and np.isnan(y[1])  # small series are untouched


# -- static plots for RL ----------------------------------------------------------------------------


def test_clip_line_only_when_on_and_never_squashing_the_norms():
    small = hand_history([1.0] * 3, norms=[0.30, 0.32, 0.28], metrics=lambda gn: optim_metrics(gn, clip=10.0))
    ax = plots.grad_norm(small)
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert xy(lines["clip threshold 10 (off the top)"]).size == 0  # named in the legend, not drawn
    assert ax.get_ylim()[1] < 0.4  # the norms fill the axes
    near = hand_history([1.0] * 3, norms=[0.30, 0.32, 0.28], metrics=lambda gn: optim_metrics(gn, clip=0.5))
    lines = {ln.get_label(): ln for ln in plots.grad_norm(near).lines}
    assert xy(lines["clip threshold"])[:, 1].tolist() == [0.5, 0.5, 0.5]
    off = hand_history([1.0] * 3, norms=[0.30, 0.32, 0.28], metrics=lambda gn: optim_metrics(gn, clip=0.0))
    assert [ln.get_label() for ln in plots.grad_norm(off).lines] == ["global"]


def test_markers_while_there_are_few_points():
    assert plots.loss(hand_history([1.0] * 30)).lines[0].get_marker() == "o"
    assert plots.loss(hand_history([1.0] * 31)).lines[0].get_marker() in ("", "None")
    # compare too (docs/history.md says "lines"): a run of one step was a line of one point, drawn as nothing
    rows = [{"run": r, "seed": 0, "step": t, "loss": 1.0} for r, n in (("one", 1), ("many", 31)) for t in range(n)]
    one, many = plots.compare(pd.DataFrame(rows)).lines
    assert (one.get_label(), one.get_marker(), many.get_label(), many.get_marker()) == ("one", "o", "many", "")


def test_a_loss_plot_without_a_step_says_so():
    """Empty axes said nothing, where the gradient norm's and learning rate's panels said why."""
    for ax in (plots.loss(History()), plots.overview(History()).axes[0]):
        assert not ax.lines and [t.get_text() for t in ax.texts] == ["no completed optimizer step yet"]


# -- LiveView --------------------------------------------------------------------------------------


def wait_until(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def settle(view, quiet=0.5):
    """Wait until no redraw happened for ``quiet`` seconds (longer than ``every``)."""
    seen, since = view.redraws, time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(0.02)
        if view.redraws != seen:
            seen, since = view.redraws, time.monotonic()


def line(view, panel, key):
    return xy(view.panels[panel].lines[key])


def is_png(data):
    return bytes(data).startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_live_view_throttles_and_always_shows_the_last_state():
    """A redraw starts at least ``every`` after the one before, so however slow the machine makes this test,
    the redraws are bounded by the time it took; the trailing one shows the last state."""
    h = hand_history([1.0], norms=[2.0])
    start = time.monotonic()
    view = LiveView(h, metrics=("reward",), every=0.3, rows=3)
    assert view.redraws == 1 and all(is_png(img.value) for img in view.images.values())
    for i in range(1, 60):  # 120 operations, 360 status changes
        add(h, "forward-backward", at=T0 + 2 * i, output=wire.ForwardBackwardResult(loss=1.0 / (i + 1)), step=i)
        add(h, "optim-step", at=T0 + 2 * i + 1, output=wire.OptimStepResult(step=i + 1, metrics=optim_metrics(2.0)))
    wait_until(lambda: view.redraws >= 2 and len(line(view, "loss", "loss")) == 60)  # a redraw counts once drawn
    assert view.redraws <= 1 + math.ceil((time.monotonic() - start) / 0.3)
    loss_line = line(view, "loss", "loss")
    assert loss_line[-1, 1] == pytest.approx(1 / 60)
    wait_until(lambda: ">60</td>" in view.steps_table.value)  # the last step is in the table
    h.log(60, reward=0.5)  # log() notifies the view too: it redraws without being asked
    wait_until(lambda: line(view, "reward", "reward").tolist() == [[60.0, 0.5]])
    view.close()


@pytest.mark.slow  # waits for throttled redraws (~1-2 s)
def test_close_waits_for_the_redraw_in_progress():
    """A redraw still running on the view's timer thread when the interpreter exits can crash it (a daemon
    thread inside matplotlib at shutdown: a segfault or an abort): close() returns once it has ended."""
    h = hand_history([1.0], norms=[2.0])
    view = LiveView(h, every=0)
    drawing, active = threading.Event(), []
    draw = view._draw_panel

    def slow_draw(name):
        active.append(name)
        drawing.set()
        time.sleep(0.3)
        draw(name)
        active.remove(name)

    view._draw_panel = slow_draw
    add(h, "forward-backward", at=T0 + 2, output=wire.ForwardBackwardResult(loss=0.5), step=1)
    add(h, "optim-step", at=T0 + 3, output=wire.OptimStepResult(step=2, metrics=optim_metrics(1.0)), step=1)
    assert drawing.wait(60)
    view.close()
    assert active == []


@pytest.mark.usefixtures("undrawn_live_view")  # reads the tables and the lines, no picture
def test_live_tables_show_steps_and_the_raw_operations_one_click_away():
    h = timeline_history()
    h.log(1, reward=0.25)
    view = LiveView(h, metrics=("reward",), every=0.05, rows=3)
    steps = view.steps_table.value
    assert steps.count("<tr>") == 2 and ">0.25</td>" in steps  # header + step 1 with its reward
    assert view.ops_table.value == ""  # hidden: not drawn
    view.tables.selected_index = 1
    table = view.ops_table.value
    assert table.count("<tr>") == 4  # header + 3 rows, newest first
    assert table.index("weights-sync") < table.index("sample") < table.index("optim-step")
    assert "forward-backward" not in table
    assert "NON_FINITE_LOSS" in table and "gradient is NaN" in table and "running" in table and "pending" in table
    assert "application/vnd.jupyter.widget-view+json" in view._repr_mimebundle_()
    view.close()
    view.close()  # idempotent
    before = view.redraws
    add(h, "sample", at=T0 + 7, status=RUNNING)
    time.sleep(0.2)
    assert view.redraws == before and len(h._listeners) == 0


def test_live_view_follows_a_real_session_from_backend_threads(tmp_path):
    s = rlnb.Session(LocalBackend("muon", "tiny", device="cpu"), runs_dir=tmp_path, run_id="live")
    view = LiveView(s.history, every=0.05)
    for i in range(3):
        s.forward_backward([samples.cross_entropy(list(b"live view"))])
        s.optim_step(rlnb.MuonParams(learning_rate=0.02, grad_clip_norm=0.5 * (i + 1)))
    s.wait()
    shown = [("loss", "loss"), *(("grad_norm", k) for k in ("grad_norm", "grad_norm_muon", "grad_clip_norm"))]
    wait_until(lambda: all(len(line(view, *key)) == 3 for key in shown))  # every line, not only the loss
    settle(view, quiet=0.2)
    steps = s.history.steps
    np.testing.assert_array_equal(line(view, "grad_norm", "grad_norm")[:, 1], steps.grad_norm)
    np.testing.assert_array_equal(line(view, "grad_norm", "grad_norm_muon")[:, 1], steps.grad_norm_muon)
    np.testing.assert_array_equal(line(view, "loss", "loss")[:, 1], steps.loss)
    legend = [t.get_text() for t in view.panels["grad_norm"].ax.get_legend().get_texts()]
    assert legend == ["global", "Muon matrices", "AdamW params", "clip threshold"]
    np.testing.assert_array_equal(line(view, "grad_norm", "grad_clip_norm")[:, 1], [0.5, 1.0, 1.5])
    view.close()
    s.close()


@pytest.mark.usefixtures("undrawn_live_view")  # reads the tables and the lines, no picture
def test_live_view_reads_neither_the_operations_table_nor_the_steps_table(monkeypatch):
    """Each redraw appends the new steps; rebuilding .df / .steps would grow with the run."""
    h = hand_history([1.0, 0.5], norms=[2.0, 1.0])
    view = LiveView(h, every=0)
    for name in ("df", "steps", "logged", "records"):
        monkeypatch.setattr(History, name, property(lambda self: pytest.fail("the live view rebuilt a table")))
    add(h, "forward-backward", at=T0 + 10, output=wire.ForwardBackwardResult(loss=0.25), step=2)
    add(h, "optim-step", at=T0 + 11, output=wire.OptimStepResult(step=3, metrics=optim_metrics(0.5)), step=2)
    view.refresh()
    assert line(view, "loss", "loss")[:, 1].tolist() == [1.0, 0.5, 0.25]
    view.close()


@pytest.mark.slow  # waits for throttled redraws (~1-2 s)
def test_live_view_redraws_only_what_changed():
    h = hand_history([1.0] * 1000, norms=[1.0 + 0.01 * (i % 7) for i in range(1000)])
    view = LiveView(h, metrics=("reward",), every=0)
    full = {name: p.full_draws for name, p in view.panels.items()}
    for i in range(1000, 1100):  # 100 more steps, a redraw after each
        add(h, "forward-backward", at=T0 + 2 * i, output=wire.ForwardBackwardResult(loss=1.0), step=i)
        add(h, "optim-step", at=T0 + 2 * i + 1, output=wire.OptimStepResult(step=i + 1, metrics=optim_metrics(1.0)))
        view.refresh()
    assert view.panels["reward"].full_draws == full["reward"]  # nothing logged: not drawn at all
    for name in ("loss", "grad_norm", "learning_rate"):  # limits move in coarse steps; otherwise only the lines
        assert view.panels[name].full_draws - full[name] <= 2, name
    view.close()


def test_live_series_keep_at_most_a_screenful_with_the_spikes():
    from rlnb.viz.series import LIVE_POINTS, Series

    y = np.linspace(5, 1, 100_000)
    y[77_777], y[33_333], y[50_000] = 50.0, -3.0, np.nan
    s = Series(ema=0.9)
    for i, v in enumerate(y):
        s.add(float(i + 1), float(v))
    x, v = s.raw.xy()
    assert len(x) <= LIVE_POINTS and np.all(np.diff(x) > 0) and x[0] == 1
    assert np.nanmax(v) == 50.0 and np.nanmin(v) == -3.0 and (s.lo, s.hi) == (-3.0, 50.0)
    smooth = plots.smooth(y, 0.9)
    sx, sv = s.smooth.xy()
    np.testing.assert_allclose(sv, smooth[sx.astype(int) - 1])  # the EMA of every point, decimated likewise
    assert len(Series().raw.xy()[0]) == 0


@pytest.mark.slow  # every toggle redraws the live view (~1 s)
def test_markers_ema_and_log_y_toggles():
    h = hand_history([1.0 / (i + 1) for i in range(30)], norms=[1.0] * 30)
    view = LiveView(h, every=0)
    assert view.panels["loss"].lines["loss"].get_marker() == "o"  # 30 points: each one marked
    view.ema_toggle.value = True
    raw, ema = view.panels["loss"].lines["loss"], view.panels["loss"].lines["loss:ema"]
    assert ema.get_visible() and raw.get_alpha() < 1
    np.testing.assert_allclose(xy(ema)[:, 1], plots.smooth(h.steps.loss, 0.9))
    view.log_toggle.value = True
    assert {p.ax.get_yscale() for p in view.panels.values()} == {"log"}
    add(h, "forward-backward", at=T0 + 100, output=wire.ForwardBackwardResult(loss=0.01), step=30)
    add(h, "optim-step", at=T0 + 101, output=wire.OptimStepResult(step=31, metrics=optim_metrics(1.0)), step=30)
    view.refresh()
    assert raw.get_marker() in ("", "None")  # 31 points: a plain line
    view.ema_toggle.value = view.log_toggle.value = False
    assert not ema.get_visible() and view.panels["loss"].ax.get_yscale() == "linear"
    view.close()


def test_log_y_before_a_run_or_on_values_that_are_not_positive_stays_linear_until_one_is():
    """Ticking *log y* on an empty view (before a run), or with a panel of zero rewards, raised from the
    checkbox (matplotlib cannot log-scale limits that include 0) and left panels in mixed scales."""
    h = History()
    view = LiveView(h, metrics=("reward",), every=0)
    view.log_toggle.value = True  # nothing yet: every panel stays linear, nothing raises
    view.ema_toggle.value = True
    assert {p.ax.get_yscale() for p in view.panels.values()} == {"linear"}
    for i in range(5):
        h.log(i + 1, reward=0.0)
    view.refresh()
    assert view.panels["reward"].ax.get_yscale() == "linear"
    h.log(6, reward=0.5)
    view.refresh()
    assert view.panels["reward"].ax.get_yscale() == "log"
    view.close()


def test_log_y_keeps_the_small_positive_points_of_a_line_that_holds_a_zero_in_view():
    """A reward that starts at 0 (or a warm-up's first learning rate): on a log axis the 0 is not drawn, and the
    positive points are (the floor was a tenth of the highest point: 0.002 to 0.05 were drawn off the axes)."""
    h = History()
    for step, reward in enumerate([0.0, 0.002, 0.01, 0.03, 0.05, 0.2, 1.0]):
        h.log(step, reward=reward)
    view = LiveView(h, metrics=("reward",), loss=False, learning_rate=False, every=0)
    view.log_toggle.value = True
    ax = view.panels["reward"].ax
    low, high = ax.get_ylim()
    assert ax.get_yscale() == "log" and low < 0.002 and high > 1.0
    view.close()


def test_an_infinite_figure_is_a_gap_in_the_live_view_not_the_end_of_its_panel():
    h = History()
    view = LiveView(h, metrics=("ppl",), every=0)
    view.ema_toggle.value = True
    for i, v in enumerate([10.0, 12.0, math.inf, 170.0, 300.0]):
        h.log(i + 1, ppl=v)
    view.refresh()
    panel = view.panels["ppl"]
    assert panel.note.get_text() == ""
    low, high = panel.ax.get_ylim()
    assert low < 10.0 and 300.0 < high < 1000.0
    ema = xy(panel.lines["ppl:ema"])[:, 1]
    assert np.isfinite(ema[-1]) and 10.0 < ema[-1] < 300.0
    view.close()


def test_live_clip_threshold_never_squashes_the_norms():
    h = hand_history([1.0] * 3, norms=[0.30, 0.32, 0.28], metrics=lambda gn: optim_metrics(gn, clip=10.0))
    view = LiveView(h, every=0)
    grad = view.panels["grad_norm"]
    assert grad.ax.get_ylim()[1] < 0.4
    legend = [t.get_text() for t in grad.ax.get_legend().get_texts()]
    assert legend == ["global", "clip threshold 10 (off the top)"]
    view.close()
    off = LiveView(hand_history([1.0] * 3, norms=[0.3] * 3, metrics=lambda gn: optim_metrics(gn, clip=0.0)), every=0)
    assert not off.panels["grad_norm"].lines["grad_clip_norm"].get_visible()  # clipping off: no line
    assert [t.get_text() for t in off.panels["grad_norm"].ax.get_legend().get_texts()] == ["global"]
    off.close()


@pytest.mark.usefixtures("undrawn_live_view")  # reads the tables and the lines, no picture
def test_live_view_can_leave_the_grpo_loss_out():
    view = LiveView(hand_history([1e-9, -1e-9], norms=[1.0, 1.0]), metrics=("reward",), loss=False, every=0)
    assert list(view.panels) == ["reward", "grad_norm", "learning_rate"]
    assert "loss" not in view.steps_table.value
    view.close()
    with pytest.raises(ValueError, match="built in"):
        LiveView(History(), metrics=("loss",))


@pytest.mark.usefixtures("undrawn_live_view")  # reads the tables and the lines, no picture
def test_live_view_starts_over_when_a_finished_operation_changes():
    h = History()
    fb = add(h, "forward-backward", at=T0, output=wire.ForwardBackwardResult(loss=1.0), step=0)
    add(h, "optim-step", at=T0 + 1, output=wire.OptimStepResult(step=1, metrics=optim_metrics(1.0)), step=0)
    view = LiveView(h, every=0)
    assert line(view, "loss", "loss").tolist() == [[1.0, 1.0]]
    h.update(fb, wire.Operation(id="op-0", status=COMPLETED, output=wire.ForwardBackwardResult(loss=3.0)), T0 + 2)
    view.refresh()
    assert line(view, "loss", "loss").tolist() == [[1.0, 3.0]] and h.steps.loss.tolist() == [3.0]
    view.close()


def test_live_view_says_why_a_remote_run_has_no_gradient_norm():
    h = hand_history([3.0, 2.0])  # optim-step output carries only `step`, as Together's does
    view = LiveView(h, every=0)
    assert view.panels["grad_norm"].note.get_text() == NA_NO_GRAD_NORM
    assert view.panels["loss"].note.get_text() == ""
    view.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_live_x_axis_leaves_room_after_the_newest_step():
    """The newest point and its marker never sit on the frame (the axis ends past the newest step)."""
    for n in (4, 8, 30):
        view = LiveView(hand_history([1.0 / (i + 1) for i in range(n)], norms=[1.0] * n), every=0)
        for panel in view.panels.values():
            assert panel.ax.get_xlim()[1] >= 1.05 * n
        view.close()


# -- RL metrics and completions in the live view -----------------------------------------------------


@pytest.mark.usefixtures("undrawn_live_view")  # reads the tables and the lines, no picture
def test_live_view_shows_the_latest_completions_collapsed_and_escaped():
    h = hand_history([1e-9, 2e-9], norms=[1.0, 1.0])
    view = LiveView(h, metrics=("reward",), every=0)
    assert view.completions.selected_index is None and view.completions.get_title(0) == "completions: none yet"
    hostile = "<script>alert(1)</script>\x00\r\n&amp;" + "9" * 300
    rows = [
        {
            "group": 0,
            "prompt": "n=<b>",
            "completion": hostile,
            "reward": 0.5,
            "advantage": 1.25,
            "length": 8,
            "truncated": True,
        },
        {
            "group": 0,
            "prompt": "n=<b>",
            "completion": "42",
            "reward": 1.0,
            "advantage": -0.5,
            "length": 3,
            "truncated": False,
        },
    ]
    h.log_completions(2, rows)
    h.log(2, reward=0.75)
    view.refresh()
    assert view.completions.get_title(0) == "completions: step 2 (2)"
    assert view.completions_table.value == ""  # collapsed: not drawn
    view.completions.selected_index = 0  # opening it draws the table
    table = view.completions_table.value
    assert table.count("<tr>") == 3 and ">42</code>" in table and ">0.5</td>" in table and ">1.25</td>" in table
    assert "<script>" not in table and "&lt;script&gt;alert(1)&lt;/script&gt;" in table
    assert "\\x00\\r\\n&amp;amp;" in table and "\x00" not in table and "&lt;b&gt;" in table
    assert "9" * 200 not in table and "…" in table  # long completions are cut (history.completions has all)
    h.log_completions(3, rows[1:] * 70)
    view.refresh()
    assert view.completions.get_title(0) == "completions: step 3 (70)"
    assert "6 more in history.completions" in view.completions_table.value  # 64 shown
    view.close()


@pytest.mark.usefixtures("undrawn_live_view")  # reads the tables and the lines, no picture
def test_live_view_rl_metrics_tab_and_no_automatic_panel_per_rl_metric(tmp_path):
    from rlnb.tasks import RL_METRICS, digits_task, rl_step
    from rlnb.viz.names import SHOWN

    s = rlnb.Session(LocalBackend("adam", "tiny", device="cpu"), runs_dir=tmp_path, run_id="rl")
    view = LiveView(s.history, metrics=None, every=0)  # automatic: a panel per logged figure, as it appears
    for i in range(2):
        rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=2, seed=i)
    s.history.log(2, mine=1.0)
    s.close()
    view.refresh()
    assert set(view.panels) == {"reward", "mine", "loss", "grad_norm", "learning_rate"}  # not 12 more
    assert view.rl_table.value == ""  # hidden tab: not drawn
    view.tables.selected_index = 2
    rl = view.rl_table.value
    shown = [m for m in RL_METRICS if m not in ("reward", "kl")]
    assert all(f"({html.escape(m)})'>{SHOWN[m].short}</th>" in rl for m in shown)  # the key on hover
    assert rl.count("<tr>") == 3  # header + 2 steps
    entropy = s.history.steps.entropy.iloc[-1]
    assert f">{entropy:.4g}</td>" in rl
    assert view.completions.get_title(0) == "completions: step 2 (12)"
    view.completions.selected_index = 0
    assert view.completions_table.value.count("<tr>") == 13
    view.close()


def test_live_view_draws_the_held_out_accuracy_on_the_reward_panel():
    """docs/tasks.md: eval/accuracy is drawn beside the reward by the overview *and the live view*; the live view
    drew it nowhere unless asked for a panel of its own (RunPanel's view: the reward only)."""
    from rlnb.tasks import EVAL_ACCURACY

    h = History()
    view = LiveView(h, metrics=("reward",), every=0)
    reward = view.panels["reward"]
    assert not reward.lines[EVAL_ACCURACY].get_visible() and reward.ax.get_legend() is None  # nothing yet
    h.log(0, **{EVAL_ACCURACY: 0.25})  # a baseline before training, as lesson.train logs it
    for step in range(1, 11):
        h.log(step, reward=step / 20)
    h.log(10, **{EVAL_ACCURACY: 0.9})
    view.refresh()
    assert list(view.panels) == ["reward", "loss", "grad_norm", "learning_rate"]  # no panel more
    assert EVAL_ACCURACY not in view.panels and reward.lines[EVAL_ACCURACY].get_visible()
    assert line(view, "reward", EVAL_ACCURACY).tolist() == [[0.0, 0.25], [10.0, 0.9]]
    assert [t.get_text() for t in reward.ax.get_legend().get_texts()] == ["reward (train)", "eval accuracy (held out)"]
    assert reward.ax.get_ylim()[1] > 0.9  # the accuracy is in view
    view.close()
    own = LiveView(h, metrics=("reward", EVAL_ACCURACY), every=0)  # asked for: a panel of its own, drawn once
    assert EVAL_ACCURACY not in own.panels["reward"].lines
    assert line(own, EVAL_ACCURACY, EVAL_ACCURACY).tolist() == [[0.0, 0.25], [10.0, 0.9]]
    own.close()


def test_one_metric_given_as_a_string_is_one_panel():
    """``metrics="reward"`` drew panels r, e, w, a, d."""
    h = History()
    h.log(1, reward=0.5, ppl=3.0)
    view = LiveView(h, metrics="reward", every=0)
    assert view.metrics == ["reward"]
    view.close()
    titles = [ax.get_title() for ax in plots.overview(h, metrics="ppl").axes]
    assert "ppl" in titles and "p" not in titles


def test_the_overviews_min_max_band_is_decimated_like_its_lines():
    """100k RL steps drew a 100k-vertex band (0.99 s against 0.3 s without it)."""
    h = History()
    n = 3 * plots.MAX_POINTS
    for i in range(n):
        h.log(
            i + 1,
            reward=0.5,
            **{
                "completions/mean_length": 4.0,
                "completions/min_length": 1.0 + i % 7,
                "completions/max_length": 8.0 + (i == n // 2),
            },
        )
    ax = next(ax for ax in plots.overview(h).axes if ax.get_title() == "completion length (tokens)")
    (band,) = ax.collections
    vertices = band.get_paths()[0].vertices
    assert len(vertices) <= 2 * plots.MAX_POINTS + 10
    assert vertices[:, 1].max() == 9.0 and vertices[:, 1].min() == 1.0  # the extremes survive


def test_a_loaded_runs_unfinished_bars_end_where_its_records_do(tmp_path):
    """A run killed mid-operation and opened a day later drew a bar to "now": 86,400 s, every real
    operation a hairline."""
    h = timeline_history()
    h.ended_at = T0 + 7  # as History.load sets it
    bars = {c.get_label(): c for c in plots.timeline(h).collections if isinstance(c, PolyCollection)}
    assert bars["running"].get_paths()[0].vertices[:, 0].max() == pytest.approx(7)
    assert bars["pending"].get_paths()[0].vertices[:, 0].max() == pytest.approx(7)
    with rlnb.connect("local", model="tiny", device="cpu", runs_dir=tmp_path, run_id="r") as s:
        s.forward_backward([samples.cross_entropy(list(b"hello"))])
        s.optim_step().result()
    assert s.history.ended_at is None  # a live run's bars end now
    loaded = History.load(tmp_path / "r")
    assert loaded.ended_at == max(r.finished_at for r in loaded.records)


def test_a_timeline_of_operations_without_submission_times_still_draws(tmp_path):
    """A run folder whose ``submitted_at`` values are all left out on load (hand-edited, or past pandas' dates):
    ``plots.timeline`` raised "NaTType does not support timestamp"; with no time at all, the same."""
    frame = timeline_history().df
    frame["submitted_at"] = frame["submitted_at"].where(frame["submitted_at"].isna())  # NaT, in its dtype (UTC)
    bars = {c.get_label(): c for c in plots.timeline(frame, now=T0 + 7).collections if isinstance(c, PolyCollection)}
    # from the first start (T0 + 0.25), the failed optim-step ran from T0 + 4.25 to T0 + 4.75
    assert bars["failed"].get_paths()[0].vertices[:, 0].min() == pytest.approx(4.0)
    for column in ("started_at", "finished_at"):
        frame[column] = frame[column].where(frame[column].isna())
    ax = plots.timeline(frame)
    assert [t.get_text() for t in ax.texts] == ["no operation has a recorded time"]


def test_arguments_that_are_not_columns_are_named():
    frame = rlnb.compare([hand_history([1.0, 2.0], config={"label": "a", "seed": 1})])
    with pytest.raises(ValueError, match="by='nope' is not a column of these runs' table; group by 'run'"):
        plots.compare(frame, by="nope")
    h = History()
    h.log(1, reward=1.0)
    with pytest.raises(ValueError, match="this table has no loss column .*plots.metric draws a logged"):
        plots.loss(h.logged)
    with pytest.raises(ValueError, match="rows must be an integer >= 1, got 0"):
        LiveView(h, rows=0)
    from rlnb.tasks import corpus

    with pytest.raises(ValueError, match=r"too short: \[0\]"):
        corpus.cross_entropy([[5]])


def test_a_plot_given_the_wrong_table_of_a_history_names_what_it_lacks(adam_history):
    """``plots.overview(h.logged)``, ``grad_norm(h.logged)``, ``learning_rate(h.logged)``, ``timeline(h.steps)`` (the
    module takes "a History or a DataFrame, whichever it needs"): bare ``KeyError: 'grad_norm'`` / ``'submitted_at'``,
    where ``loss(h.logged)`` named what it lacks."""
    steps_table = r"\(it has step, reward\): pass a History, history.df or history.steps"
    for draw in (plots.overview, plots.grad_norm):
        with pytest.raises(ValueError, match=rf"this table has no grad_norm, .*grad_clip_norm columns {steps_table}"):
            draw(adam_history.logged)
    with pytest.raises(ValueError, match=rf"this table has no learning_rate column {steps_table}"):
        plots.learning_rate(adam_history.logged)
    for table in (adam_history.steps, adam_history.logged):
        with pytest.raises(ValueError, match=r"this table has no kind, status, .*: plots.timeline draws the op"):
            plots.timeline(table)
    assert plots.overview(adam_history.steps) and plots.timeline(adam_history.df)


def test_a_session_given_for_its_history_is_named():
    """``plots.loss(session)`` (any plot) and ``LiveView(session)``: ``AttributeError: 'Session' object has no
    attribute 'columns'`` (or ``'step_log'``), naming neither the argument nor ``session.history``."""
    s = rlnb.Session(FakeBackend(), record=False)
    for draw in (plots.loss, plots.grad_norm, plots.learning_rate, plots.overview, plots.timeline):
        with pytest.raises(TypeError, match=f"plots.{draw.__name__} takes a History or a DataFrame, got Session: pass"):
            draw(s)
    with pytest.raises(TypeError, match="plots.metric takes a History or a DataFrame, got NoneType$"):
        plots.metric(None, "acc")
    with pytest.raises(TypeError, match="LiveView takes a History, got Session: pass session.history"):
        LiveView(s)
    for metrics in ([5], ["acc", ""], [None]):  # [5]: "unsupported operand type(s) for +: 'int' and 'str'"
        said = f"metrics must be the names of logged figures, got {re.escape(repr(metrics))}"
        with pytest.raises(TypeError, match=said):
            LiveView(s.history, metrics=metrics)
    plots.metric(history=s.history, name="acc")  # by keyword, as before
    s.close()


@pytest.mark.parametrize("ema", ["0.9", True, math.nan, 1])
def test_an_ema_that_is_no_number_in_range_is_named(ema):
    """``plots.metric(h, "acc", ema="0.9")`` (or ``LiveView(h, ema="0.9")``): a bare ``TypeError: '<=' not supported
    between instances of 'int' and 'str'``."""
    h = History()
    h.log(1, acc=0.5)
    said = f"ema must be a number in \\[0, 1\\), got {re.escape(repr(ema))}"
    with pytest.raises(ValueError, match=said):
        plots.metric(h, "acc", ema=ema)
    with pytest.raises(ValueError, match=said):
        LiveView(h, ema=ema)
    plots.metric(h, "acc", ema=np.int64(0))  # a numpy number is a number


@pytest.mark.parametrize("every", [math.inf, 1e300, math.nan, -1, "1", None])
def test_a_live_view_refuses_a_redraw_interval_its_timer_cannot_keep(every):
    """``LiveView(h, every=inf)`` (or 1e300) drew once, then its timer thread died on ``OverflowError: timestamp
    out of range`` (in the kernel's log) and the view froze for the run; NaN passed ``every < 0`` and redrew at
    every change; a string or None was a bare ``TypeError`` from ``<``."""
    with pytest.raises(ValueError, match=r"every must be a finite number of seconds in \[0, 86400\], got "):
        LiveView(History(), every=every)


def test_figures_near_the_largest_float_are_drawn():
    """A figure of 1.7e308 (or two of opposite signs past 9e307): the y-limits overflowed to inf, and every
    redraw after raised, on the timer thread, where nobody saw it: the view froze."""
    h = History()
    view = LiveView(h, metrics=("big",), every=0)
    for i, v in enumerate([1.7e308, -1.7e308, 5.0]):
        h.log(i + 1, big=v)
        view.refresh()
    panel = view.panels["big"]
    low, high = panel.ax.get_ylim()
    assert math.isfinite(low) and math.isfinite(high) and low < 5.0 < high and view.error is None
    assert is_png(view.images["big"].value) and "<td" in view.steps_table.value
    view.log_toggle.value = True
    assert panel.ax.get_yscale() == "log" and view.error is None
    view.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_static_plots_of_figures_near_the_largest_float_are_drawn():
    """The live view drew them, but ``plots.metric``, ``plots.overview`` and ``plots.compare`` of a figure of 1.7e308
    (an ``exp(loss)`` that overflowed once) failed when shown: ``ValueError: arange: cannot compute length``."""
    import io

    h = History()
    s = rlnb.Session(FakeBackend(), history=h)
    for i, v in enumerate([1.7e308, -1.7e308, 5.0]):
        s.forward_backward([samples.cross_entropy(list(b"ab"))])
        s.optim_step()
        s.wait()
        h.log(i + 1, big=v)
    s.close()
    drawings = (plots.metric(h, "big"), plots.metric(h, "big", ema=0.5), plots.overview(h, metrics=["big"]))
    for drawn in (*drawings, plots.compare([h], y="big")):
        figure = drawn if isinstance(drawn, Figure) else drawn.figure
        figure.savefig(io.BytesIO(), format="png")
        ax = drawn if not isinstance(drawn, Figure) else next(a for a in drawn.axes if a.get_title() == "big")
        low, high = ax.get_ylim()
        assert -1e300 <= low < 5.0 < high <= 1e300
    assert plots.metric(h, "big").get_autoscaley_on() is False and plots.loss(h).get_autoscaley_on() is True


def test_a_column_of_the_steps_table_is_drawn_where_a_logged_figure_would_be(adam_history):
    """``overview(h, metrics=["learning_rate"])`` and ``metric(h, "learning_rate")`` said "no 'learning_rate' logged
    yet" under a run that reported one every step (the steps table has it, ``compare`` drew it); ``metrics=["loss"]``
    added a second loss panel saying no loss was logged."""
    lr = adam_history.steps["learning_rate"].to_numpy(float)
    assert list(xy(plots.metric(adam_history, "learning_rate").lines[0])[:, 1]) == list(lr)
    fig = plots.overview(adam_history, metrics=["learning_rate", "loss"])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles.count("loss") == 1 and "learning_rate" in titles
    panel = fig.axes[titles.index("learning_rate")]
    assert list(xy(panel.lines[0])[:, 1]) == list(lr) and not panel.texts


def test_a_figure_logged_in_calls_of_its_own_is_drawn_as_a_line():
    """An accuracy logged every 10 steps in a ``history.log`` call of its own (as ``lesson.train`` and ``rlnb demo``
    log ``eval/accuracy``) is NaN in the reward's rows: ``plots.metric`` and ``overview(metrics=...)`` drew ten dots
    between gaps and, past 30 rows (no markers), an empty axes; the reward's line broke at each of them."""
    h = History()
    for step in range(1, 101):
        h.log(step, reward=step / 100)
        if step % 10 == 0:
            h.log(step, acc=step / 200)
    fig = plots.overview(h, metrics=["acc"])
    for ax in (plots.metric(h, "acc"), next(a for a in fig.axes if a.get_title() == "acc")):
        assert xy(ax.lines[0]).tolist() == [[s, s / 200] for s in range(10, 101, 10)]
    assert not np.isnan(xy(plots.metric(h, "reward").lines[0])).any()


def test_a_redraw_that_fails_on_the_timer_thread_is_shown_on_the_view(monkeypatch):
    """A failed redraw on the timer thread went to the kernel's log (or nowhere) and the view froze without a
    word; it is shown above the plots and kept in view.error until a redraw succeeds."""
    from rlnb.viz.livefig import Panel

    escaped, hook = [], threading.excepthook
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value) or hook(args))
    h = History()
    view = LiveView(h, metrics=("reward",), every=0.05)
    render = Panel.render
    monkeypatch.setattr(Panel, "render", lambda self: (_ for _ in ()).throw(RuntimeError("no <memory> left")))
    h.log(1, reward=0.5)  # a redraw on the timer thread
    wait_until(lambda: view.error is not None)
    assert isinstance(view.error, RuntimeError) and view.message.layout.display is None
    assert "the live view could not redraw: RuntimeError: no &lt;memory&gt; left" in view.message.value
    monkeypatch.setattr(Panel, "render", render)
    h.log(2, reward=0.7)
    wait_until(lambda: view.error is None)
    assert view.message.layout.display == "none" and list(line(view, "reward", "reward")[:, 1]) == [0.5, 0.7]
    view.close()
    assert escaped == []


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_figure_or_run_named_with_dollar_signs_is_drawn_as_written():
    """matplotlib reads text between two ``$`` as TeX: a figure logged as ``"$\\nope$ cost"`` (or a run label, a
    status string of a loaded run) made ``plots.metric``, ``plots.overview``, ``plots.compare`` and the live view
    fail when drawn (``ParseFatalException: Unknown symbol``), and ``"price $5 to $10"`` lost its dollars."""
    import io

    name = "$\\nope$ cost"
    h = History(config={"label": "lr $1$ \\bad$"})
    s = rlnb.Session(FakeBackend(), history=h)
    for i in range(3):
        s.forward_backward([samples.cross_entropy(list(b"ab"))])
        s.optim_step()
        s.wait()
        h.log(i + 1, **{name: float(i), "price $5 to $10": 1.0})
    s.close()
    for drawn in (
        plots.metric(h, name),
        plots.metric(h, "price $5 to $10"),
        plots.overview(h, metrics=[name]),
        plots.compare([h]),
        plots.timeline(h),
    ):
        figure = drawn if isinstance(drawn, Figure) else drawn.figure
        figure.savefig(io.BytesIO(), format="png")
    assert not plots.metric(h, "price $5 to $10").title.get_parse_math()  # shown as written
    view = LiveView(h, metrics=None, every=0)
    view.refresh()
    assert view.error is None
    view.close()


def test_compare_has_its_defaults_in_one_place():
    """Guard: ``plots.compare`` and ``comparison.compare`` both wrote y="loss", by="run", band="auto": the drawing
    takes every argument, so a default changed in ``plots.compare`` is the one drawn."""
    import inspect

    from rlnb.viz import comparison, plots

    drawing = inspect.signature(comparison.compare).parameters.values()
    assert [p.name for p in drawing if p.default is not inspect.Parameter.empty] == []
    assert list(inspect.signature(plots.compare).parameters) == [p.name for p in drawing]
