"""Plots and the live view, checked on the figure objects (lines, collections, texts), not pixels."""

import math
import os
import time

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import rlnb
from rlnb import plots, samples, wire
from rlnb.backends.local import LocalBackend
from rlnb.history import NA_NO_GRAD_NORM, History
from rlnb.live import LiveView

PENDING, RUNNING = "TRAINING_OPERATION_STATUS_PENDING", "TRAINING_OPERATION_STATUS_RUNNING"
COMPLETED, FAILED = "TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"
NON_FINITE = "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
T0 = 1_700_000_000.0


def add(h, kind, *, at, output=None, error=None, status=COMPLETED, step=None, run=0.5):
    """One operation through the backends' path: History.new, then wire envelopes into History.update."""
    rec = h.new(kind, step, None, at=at)
    if status == PENDING:
        return rec
    h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=RUNNING), at + 0.25)
    if status != RUNNING:
        env = wire.Operation(id=f"op-{rec.seq}", status=status, output=output, error=error)
        h.update(rec, env, at + 0.25 + run)
    return rec


def optim_metrics(gn, clip=1.0, lr=1e-3, **extra):
    return {"grad_norm": gn, "grad_clip_norm": clip, "learning_rate": lr, **extra}


def hand_history(losses, norms=None, config=None, metrics=None):
    """A step per loss: forward-backward then optim-step (reporting ``norms``, or only ``step``)."""
    h = History(config=config or {})
    for i, value in enumerate(losses):
        add(h, "forward-backward", at=T0 + 2 * i, output=wire.ForwardBackwardResult(loss=value), step=i)
        m = None if norms is None else (metrics or optim_metrics)(norms[i])
        add(h, "optim-step", at=T0 + 2 * i + 1, output=wire.OptimStepResult(step=i + 1, metrics=m), step=i)
    return h


@pytest.fixture(scope="module")
def adam_history(tmp_path_factory):
    """A real in-process session: 4 steps, clipping off at step 3, a reward logged per step."""
    s = rlnb.Session(LocalBackend("adam", "tiny", device="cpu"), runs_dir=tmp_path_factory.mktemp("runs"), run_id="p")
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
    assert [ax.get_title() for ax in fig.axes] == ["loss", "gradient norm (pre-clip)", "reward", "missing"]
    assert [t.get_text() for t in fig.axes[3].texts] == ["no 'missing' logged yet"]


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
    one = plots.compare(seeded_runs()[:1], y="grad_norm")
    assert [ln.get_label() for ln in one.lines] == ["adam"] and not one.collections


def test_compare_ema_smooths_each_seed_before_averaging():
    frame = rlnb.compare(seeded_runs())
    ax = plots.compare(frame, ema=0.5)
    per_seed = [plots.smooth(g.loss, 0.5) for _, g in frame[frame.run == "adam"].groupby("seed")]
    np.testing.assert_allclose(xy(ax.lines[0])[:, 1], np.mean(per_seed, axis=0))


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


# -- LiveView --------------------------------------------------------------------------------------


def wait_until(predicate, timeout=5.0):
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


def test_live_view_throttles_and_always_shows_the_last_state():
    h = hand_history([1.0], norms=[2.0])
    view = LiveView(h, metrics=("reward",), every=0.3, rows=3)
    assert view.redraws == 1 and bytes(view.image.value).startswith(b"\x89PNG\r\n\x1a\n")
    start = time.monotonic()
    for i in range(1, 60):  # 120 operations, 360 status changes, well within `every`
        add(h, "forward-backward", at=T0 + 2 * i, output=wire.ForwardBackwardResult(loss=1.0 / (i + 1)), step=i)
        add(h, "optim-step", at=T0 + 2 * i + 1, output=wire.OptimStepResult(step=i + 1, metrics=optim_metrics(2.0)))
    pumped = time.monotonic() - start
    settle(view)
    assert 2 <= view.redraws <= 2 + math.ceil(pumped / 0.3)
    loss_line = view.figure.axes[0].lines[0]
    assert len(loss_line.get_xydata()) == 60 and loss_line.get_xydata()[-1, 1] == pytest.approx(1 / 60)
    assert ">119</td>" in view.table.value  # the last operation is in the table
    h.log(60, reward=0.5)  # log() does not notify listeners: refresh() shows it
    assert view.figure.axes[2].lines[0].get_xydata().size == 0
    view.refresh()
    assert view.figure.axes[2].lines[0].get_xydata().tolist() == [[60.0, 0.5]]
    view.close()


def test_live_table_lists_the_latest_operations_and_close_unsubscribes():
    h = timeline_history()
    view = LiveView(h, every=0.05, rows=3)
    table = view.table.value
    assert table.count("<tr>") == 4  # header + 3 rows, newest first
    assert table.index("weights-sync") < table.index("sample") < table.index("optim-step")
    assert "forward-backward" not in table
    assert "NON_FINITE_LOSS" in table and "gradient is NaN" in table and "running" in table and "pending" in table
    assert "weights-sync" in view.widget.children[1].value and view.widget.children[0] is view.image
    assert "application/vnd.jupyter.widget-view+json" in view._repr_mimebundle_()
    view.close()
    view.close()  # idempotent
    before = view.redraws
    add(h, "sample", at=T0 + 7, status=RUNNING)
    time.sleep(0.2)
    assert view.redraws == before and h._listeners == []


def test_live_view_follows_a_real_session_from_backend_threads(tmp_path):
    s = rlnb.Session(LocalBackend("muon", "tiny", device="cpu"), runs_dir=tmp_path, run_id="live")
    view = LiveView(s.history, every=0.05)
    for i in range(3):
        s.forward_backward([samples.cross_entropy(list(b"live view"))])
        s.optim_step(rlnb.MuonParams(learning_rate=0.02, grad_clip_norm=0.5 * (i + 1)))
    s.wait()
    wait_until(lambda: "optim-step" in view.table.value and len(view.figure.axes[0].lines[0].get_xydata()) == 3)
    settle(view, quiet=0.2)
    steps = s.history.steps
    lines = {ln.get_label(): ln for ln in view.figure.axes[1].lines}
    np.testing.assert_array_equal(xy(lines["global"])[:, 1], steps.grad_norm)
    np.testing.assert_array_equal(xy(lines["Muon matrices"])[:, 1], steps.grad_norm_muon)
    np.testing.assert_array_equal(xy(lines["clip threshold"])[:, 1], [0.5, 1.0, 1.5])
    view.close()
    s.close()
