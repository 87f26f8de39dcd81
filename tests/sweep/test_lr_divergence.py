"""A range test judged on the curve before it diverged, and on the rates it measured when stopped early; its figure and
``search_plot`` drawn at values near float64's largest (review38c M1, L9, L2)."""

import io
import math
import threading

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

import rlnb
from rlnb import samples
from rlnb.sweep import lr_find, search_plot
from rlnb.sweep.lr.curve import spaced
from rlnb.viz.draw import Y_SPAN

TEXT = list(b"the quick brown fox jumps over the lazy dog; the digits 0123456789 and more text to fit. " * 2)


def sigmoid_then(spike):
    """A loss falling 2.0 → 0.2 around step 9 of 25 (lr 7.5e-4), then ``spike`` from step 13."""
    return lambda session, params, i: spike if i >= 13 else 2.0 - 1.8 / (1 + math.exp(-(i - 9) / 1.5))


def test_a_blow_up_after_a_fall_does_not_make_the_fall_flat(tmp_path):
    """A spike of 20 or 50 (10-25× the start) after the loss fell 2.0 → 0.4: the zero-lag smoothing carried it back
    over the fall, called "flat" (4.4%, 0.5% of the spike's size); a spike of 3-10 moved the suggestion down
    (0.00046 → 0.00029). The curve judged ends where the loss passed DIVERGE× its lowest: the fall's steepest rate."""
    lrs = spaced(1e-5, 1.0, 25)
    for spike in (20.0, 50.0, 10.0):
        found = lr_find(rlnb.AdamParams(), steps=25, objective="loss", step_fn=sigmoid_then(spike), runs_dir=tmp_path)
        assert found.suggestion == float(f"{lrs[9]:.2g}"), (spike, found.reason)
        assert found.reason == (f"steepest descent of the smoothed loss; judged up to lr {lrs[12]:.3g}: at lr "
                                f"{lrs[13]:.3g} the loss was over 4× its lowest (diverging); ended early: diverged at "
                                f"lr {lrs[13]:.3g}")  # fmt: skip
        assert len(found.smoothed) == len(found.values) == 14 and math.isnan(found.smoothed[-1])
        assert not math.isnan(found.smoothed[-2])


def test_a_spike_under_the_divergence_threshold_keeps_the_curve_whole(tmp_path):
    """A loss back up to 1.0 (2.4× its lowest, under DIVERGE×) is judged with the rest: the curve is not cut."""
    found = lr_find(rlnb.AdamParams(), steps=25, objective="loss", step_fn=sigmoid_then(1.0), runs_dir=tmp_path)
    assert "judged up to" not in found.reason and not any(math.isnan(v) for v in found.smoothed)


def test_a_real_short_test_whose_loss_fell_then_blew_up_gets_a_suggestion(tmp_path):
    """review38c M1: cross-entropy on tiny, 15 steps to lr 10: the loss fell 985 → 611 (38%), then 1296 … 22902;
    it was called "flat (it improves 0.1% of its size)"."""

    def ce_step(session, params, i):
        fb = session.forward_backward([samples.cross_entropy(TEXT)])
        session.optim_step(params).result()
        return fb.result().loss

    base = rlnb.AdamParams(weight_decay=0.0, grad_clip_norm=0.0)
    found = lr_find(base, steps=15, end_lr=10.0, objective="loss", step_fn=ce_step, runs_dir=tmp_path, threads=1)
    assert min(found.values) < 0.7 * found.values[0]  # the fall
    assert found.suggestion is not None and 1e-4 < found.suggestion < 0.1, found.reason
    assert "flat" not in found.reason and "diverging" in found.reason


def stopped_at(step, value):
    """A step_fn of ``value(i)`` whose test is stopped before step ``step``; the event for ``stop=``."""
    event = threading.Event()

    def fn(session, params, i):
        if i == step - 1:
            event.set()
        return value(i)

    return fn, event


def test_a_stopped_test_is_not_judged_on_rates_it_never_reached(tmp_path):
    """review38c L9: stopped at step 12 of 30, a flat curve was "nothing here learns faster at one rate than another"
    and a rising one "try a wider range (a smaller start_lr and a larger end_lr)": verdicts on the whole range."""
    fn, event = stopped_at(12, lambda i: 0.5)
    found = lr_find(rlnb.AdamParams(), steps=30, step_fn=fn, stop=event, runs_dir=tmp_path)
    assert len(found.values) == 12 and found.suggestion is None
    assert "nothing here learns faster" not in found.reason
    last = f"{found.lrs[-1]:.3g}"
    assert found.reason.startswith(f"no clear suggestion: the smoothed reward is flat up to lr {last}, where the test "
                                   "was stopped (it improves 0.0% of its size before its best point; below 5% counts "
                                   "as flat): the rates past it were not measured")  # fmt: skip
    fn, event = stopped_at(12, lambda i: i / 30)
    found = lr_find(rlnb.AdamParams(), steps=30, step_fn=fn, stop=event, runs_dir=tmp_path)
    assert found.reason.startswith(f"no clear suggestion: the smoothed reward still improved at lr {last}, where the "
                                   "test was stopped: run the whole range")  # fmt: skip
    assert found.reason.endswith("; ended early: stopped after 12 steps")
    whole = lr_find(rlnb.AdamParams(), steps=30, step_fn=lambda s, p, i: 0.5, runs_dir=tmp_path)
    assert whole.reason.endswith("— nothing here learns faster at one rate than another")  # a whole range: as before


def test_the_figure_and_search_plot_draw_values_near_the_largest_float(tmp_path):
    """review38c L2: both raised "arange: cannot compute length" at 1.7e308, which plots.metric draws."""
    found = lr_find(rlnb.AdamParams(), steps=8, objective="loss", step_fn=lambda s, p, i: 1.7e308, runs_dir=tmp_path)
    fig = found.figure()
    fig.savefig(io.BytesIO(), format="png")
    assert fig.axes[0].get_ylim()[1] <= Y_SPAN
    trials = pd.DataFrame({"trial": [0, 1, 2], "learning_rate": [1e-3, 1e-2, 1e-1], "status": ["COMPLETED"] * 3,
                           "final_loss": [1e-10, 1.7e308, 1.6e308], "value": [0.5, 0.6, 0.7]})  # fmt: skip
    trials.attrs["objective"] = "loss"
    ax = search_plot(trials, y="final_loss")
    assert isinstance(ax.figure, Figure)
    ax.figure.savefig(io.BytesIO(), format="png")
    assert ax.get_ylim()[1] <= Y_SPAN
    plt.close("all")


def test_one_noisy_batch_past_the_threshold_that_the_loss_falls_back_from_keeps_the_curve_whole(tmp_path):
    """review38d F1: a loss falling 2.0 → 1.1, one batch at 4.5 (over 4× its lowest), then falling on to 0.2: the
    stop rule (smoothed) ran on, and the judging cut the better rates it measured (no suggestion, "about one rate").
    A divergence is a rise the loss never comes back from."""
    curve = [2.0 - 0.1 * i for i in range(10)] + [1.0 - 0.8 * (1 - math.exp(-i / 4)) for i in range(1, 21)]
    curve[10] = 4.5
    found = lr_find(rlnb.AdamParams(weight_decay=0.0), steps=30, start_lr=1e-5, end_lr=1.0, objective="loss",
                    step_fn=lambda session, params, i: curve[i], runs_dir=tmp_path)  # fmt: skip
    assert "judged up to" not in found.reason and found.suggestion is not None, found.reason
    assert not any(math.isnan(v) for v in found.smoothed)
