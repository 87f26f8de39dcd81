"""A step logged twice (a resumed run that logged its last step again, a sink's rows read back, two tables joined):
each plot draws that step once, with the value logged last, and says on the axes how many steps came more than
once. Checked on the lines' data of real matplotlib figures."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pandas as pd
import pytest

from rlnb.history import History
from rlnb.viz import plots

RELOGGED = [(1, 0.1), (2, 0.2), (3, 0.3), (2, 0.25), (3, 0.35), (4, 0.4)]
"""Steps 2 and 3 logged again (a run resumed from step 1's checkpoint): 0.25 and 0.35 are their last values."""
LAST = [[1.0, 0.1], [2.0, 0.25], [3.0, 0.35], [4.0, 0.4]]


def relogged() -> History:
    h = History()
    for step, reward in RELOGGED:
        h.log(step, reward=reward, kl=reward / 10)
    return h


def said(ax) -> list[str]:
    return [t.get_text() for t in ax.texts if "logged more than once" in t.get_text()]


def steps_table() -> pd.DataFrame:
    """A steps table read back from a file, step 2 in it twice (its second row the later one)."""
    nan = float("nan")
    return pd.DataFrame({"step": [1, 2, 2, 3], "loss": [1.0, 2.0, 2.5, 3.0], "grad_norm": [0.1, 0.2, 0.3, 0.4],
                         "grad_norm_muon": nan, "grad_norm_adam": nan, "grad_clip_norm": 0.0,
                         "learning_rate": [1e-3, 2e-3, 3e-3, 4e-3]})  # fmt: skip


def test_a_figure_logged_twice_at_a_step_is_drawn_once_there_with_its_last_value():
    """``plots.metric`` drew both values at steps 2 and 3: six points, the line going down and up across each."""
    ax = plots.metric(relogged(), "reward")
    assert ax.lines[0].get_xydata().tolist() == LAST
    assert said(ax) == ["2 steps logged more than once: the last value of each drawn"]


def test_the_overviews_panels_draw_each_step_once_and_say_so():
    fig = plots.overview(relogged())
    reward, kl = fig.axes[0], next(a for a in fig.axes if a.get_title() == "KL to the reference")
    assert reward.lines[0].get_xydata().tolist() == LAST
    assert [x for x, _ in kl.lines[0].get_xydata().tolist()] == [1.0, 2.0, 3.0, 4.0]
    assert kl.lines[0].get_xydata()[1, 1] == pytest.approx(0.025)
    assert said(reward) == said(kl) == ["2 steps logged more than once: the last value of each drawn"]


@pytest.mark.parametrize("plot", [plots.loss, plots.grad_norm, plots.learning_rate])
def test_a_steps_table_holding_a_step_twice_draws_it_once_with_its_last_row(plot):
    ax = plot(steps_table())
    xy = ax.lines[0].get_xydata().tolist()
    assert [x for x, _ in xy] == [1.0, 2.0, 3.0]
    assert xy[1][1] == {"loss": 2.5, "grad_norm": 0.3, "learning_rate": 3e-3}[plot.__name__]
    assert said(ax) == ["1 step logged more than once: the last value of each drawn"]


def test_a_figure_logged_in_calls_of_its_own_at_the_same_step_is_not_a_repeat():
    """An eval accuracy logged in a call of its own at a reward's step: two rows at that step, each figure once."""
    h = History()
    for step in (1, 2):
        h.log(step, reward=0.1 * step)
        h.log(step, acc=0.5 * step)
    for name, value in (("reward", 0.2), ("acc", 1.0)):
        ax = plots.metric(h, name)
        assert ax.lines[0].get_xydata().tolist()[-1] == [2.0, value] and not said(ax)


def test_a_live_view_draws_a_step_logged_again_once_with_its_last_value():
    """The live view fed a step logged again as a second point there, as the static plots drew it."""
    from rlnb.viz.live import LiveView

    h = History()
    view = LiveView(h, metrics=("reward",), every=0, loss=False, learning_rate=False)
    try:
        for step, reward in RELOGGED:
            h.log(step, reward=reward)
            view.refresh()  # each log drawn as it comes, as in a run
        assert view.panels["reward"].lines["reward"].get_xydata().tolist() == LAST
    finally:
        view.close()


def test_compare_draws_a_seed_that_holds_a_step_twice_once_there():
    """A seed's table holding step 2 twice was averaged with itself at that step, as if it were two seeds (its mean
    0.225 and a band), and the dashed "fewer seeds" line began there."""
    frame = pd.DataFrame({"run": "a", "seed": [0, 0, 0, 0, 1, 1, 1], "step": [1, 2, 2, 3, 1, 2, 3],
                          "loss": [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 4.0]})  # fmt: skip
    ax = plots.compare(frame)
    assert ax.lines[0].get_xydata().tolist() == [[1.0, 1.0], [2.0, 2.5], [3.0, 4.0]]
    assert len(ax.lines) == 1  # no dashed line: both seeds reach step 3
    assert said(ax) == ["1 step logged more than once: the last value of each drawn"]


def draw_repeats(ax, counts) -> None:
    """``once_per_step`` of one line a count on ``ax``: ``n`` steps each logged twice, and a step 99 once."""
    from rlnb.viz import draw

    for n in counts:
        rows = pd.DataFrame({"step": [*range(n), *range(n), 99]})
        assert draw.once_per_step(ax, rows)["step"].tolist() == [*range(n), 99]


def test_an_axes_of_several_lines_notes_the_most_repeats_of_one_line_once():
    """Guard: one note on an axes of several lines, the most steps any one line repeated (not the last line's)."""
    from rlnb.viz import draw

    ax = draw.new_axes(None)
    draw_repeats(ax, (1, 3, 2, 0))
    assert said(ax) == ["3 steps logged more than once: the last value of each drawn"]


def test_the_notes_count_is_a_number_kept_apart_from_its_wording(monkeypatch):
    """The count was read back from the note's text (its first word): a wording that does not begin with it failed
    the next line's ``once_per_step`` with ``int()``'s ValueError."""
    from rlnb.viz import draw

    monkeypatch.setattr(draw, "REPEATED", "repeated step{s}: {n}")
    ax = draw.new_axes(None)
    draw_repeats(ax, (2, 1, 4))
    assert [t.get_text() for t in ax.texts] == ["repeated steps: 4"]


@pytest.mark.filterwarnings("ignore::rlnb.history.runs.RunContinuedWarning")  # the second session starts at 0
def test_a_live_views_step_lines_draw_a_repeated_step_once_in_step_order(tmp_path):
    """Two sessions of one run, each from step 0 (steps 1-3 twice): the live loss line ran back across the panel
    (x 1, 2, 3, 1, 2, 3) where ``plots.loss`` draws each step once, with its last value."""
    import rlnb
    from rlnb import samples
    from rlnb.testing import FakeBackend
    from rlnb.viz.live import LiveView

    for first in (True, False):
        s = rlnb.Session(FakeBackend("adam", loss=lambda step, k=first: 1.0 + step + (0 if k else 10)),
                         runs_dir=tmp_path, run_id="r")  # fmt: skip
        view = LiveView(s.history, every=0) if not first else None
        for _ in range(3):
            s.forward_backward([samples.cross_entropy([1, 2, 3])])
            s.optim_step(rlnb.AdamParams()).result(timeout=30)
            if view is not None:
                view.refresh()
        s.close()
    xy = view.series["loss"].raw.xy()
    drawn = plots.loss(s.history).lines[0].get_xydata().tolist()
    assert [list(p) for p in zip(*xy, strict=True)] == drawn
    assert [x for x, _ in drawn] == [1.0, 2.0, 3.0]
    view.close()
