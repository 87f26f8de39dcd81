"""A range test of a ``VerifiedTask`` whose reward rises only to a constant answer's score says so and draws the task's
chance: Adam on first_letter from lr 10 collapsed onto one letter for every prompt (reward 0.25, chance) from step 2
on, and the reason read "the smoothed reward already improved", the plot a bare rise to a plateau (review42b F3)."""

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

import rlnb
from rlnb.sweep import lr_find
from rlnb.sweep.lr.curve import at_chance
from rlnb.sweep.lr.find import LRFind, _judged
from rlnb.sweep.lr.measure import Measured
from rlnb.tasks import first_letter_task
from rlnb.widgets.suggestion import Suggestion

CONSTANT = "the smoothed reward rose only to a constant answer's score"


def test_a_rise_to_chance_is_said_and_a_rise_past_it_is_not():
    up_to_chance = [0.0, 0.1, 0.2, 0.25, 0.25, 0.25]
    assert at_chance(up_to_chance, 0.25).startswith(f"{CONSTANT} (0.25, chance 0.25)")
    assert at_chance([0.0, 0.1, 0.3, 0.34], 0.25).startswith(CONSTANT)  # within chance + 0.1
    assert at_chance([0.0, 0.3, 0.6, 0.9], 0.25) == ""  # learned past any constant answer
    assert at_chance(up_to_chance, None) == "" and at_chance(up_to_chance, 0.0) == ""  # no chance known
    assert at_chance([0.25] * 6, 0.25) == ""  # flat: it rose to nothing ("flat" says it)
    assert at_chance([0.0, 0.25, math.nan], 0.25).startswith(CONSTANT)  # a NaN past the end is not read


def test_the_plot_draws_the_chance_line_when_known():
    found = LRFind([1e-3, 1e-2], [0.0, 0.25], [0.0, 0.25], None, "reward", "adam", None, "no clear suggestion: …")
    labels = [str(line.get_label()) for line in found.plot(Figure().add_subplot()).lines]
    assert not any("constant answer" in label for label in labels)
    found.chance = 0.25
    ax = found.plot(Figure().add_subplot())
    line = next(line for line in ax.lines if line.get_label() == "a constant answer (chance 0.25)")
    assert set(np.asarray(line.get_ydata(), dtype=float)) == {0.25}


@pytest.mark.slow  # a 10-step range test of tiny (~2 s)
def test_a_collapse_onto_one_answer_is_not_read_as_learning(tmp_path):
    task = first_letter_task()
    found = lr_find(rlnb.AdamParams(weight_decay=0.0), task=task, steps=10, seed=11, start_lr=10.0, end_lr=1000.0,
                    runs_dir=tmp_path, device="cpu", threads=1)  # fmt: skip
    assert max(found.values) <= task.chance + 0.1 and found.values[-1] == pytest.approx(task.chance, abs=0.05)
    assert f"; {CONSTANT}" in found.reason and found.chance == task.chance and found.at_chance.startswith(CONSTANT)
    labels = [str(line.get_label()) for line in found.plot(Figure().add_subplot()).lines]
    assert any(label.startswith("a constant answer") for label in labels)
    digits = lr_find(rlnb.AdamParams(weight_decay=0.0), steps=5, runs_dir=tmp_path, device="cpu", threads=1)
    assert digits.chance is None and "constant answer" not in digits.reason  # a Task with no answer: no chance


def test_find_lrs_status_line_keeps_the_words_beside_a_suggestion():
    note = at_chance([0.0, 0.2, 0.25], 0.25)
    found = LRFind([1e-3, 1e-2], [0.0, 0.25], [0.0, 0.25], 0.01, "reward", "adam", None,
                   f"steepest ascent of the smoothed reward; {note}", chosen="steepest ascent of the smoothed reward",
                   at_chance=note)  # fmt: skip
    said = Suggestion.describe(found, "", [])
    assert f"steepest ascent of the smoothed reward ({CONSTANT} (0.25, chance 0.25)" in said


def test_a_range_test_stopped_before_its_first_rate_draws_without_the_chance_line():
    """Stopped before any rate was measured (Stop on the panel's Find LR at once), the chance line alone left the log x
    axis nothing to scale: drawing failed "Data cannot be log-scaled" and the panel showed that instead of "ended
    early" (ci127, tests/widgets/test_browser_narrow.py). With a rate, the line is drawn."""
    import io

    def drawn(lrs: list[float]) -> list[str]:
        values = [0.1] * len(lrs)
        found = LRFind(lrs=lrs, values=values, smoothed=values, suggestion=None, objective="reward", optimizer="adam",
                       muon_scaling=None, reason="ended early", run_path=None, adam_ratio=None, params=None,
                       interrupted=True, extra={}, chance=0.25)  # fmt: skip
        fig = found.figure()
        fig.savefig(io.BytesIO(), format="png")
        return [str(line.get_label()) for line in fig.axes[0].lines]

    assert not any("constant answer" in label for label in drawn([]))
    assert any("constant answer" in label for label in drawn([1e-5]))


def test_a_results_notes_are_fields_and_the_status_line_reads_them():
    """The range test's findings reach the status line as ``LRFind``'s fields, not as parts of ``reason`` split on
    "; ": a note that contains "; " (an error's words where the test ended) is said whole."""
    lrs = list(np.logspace(-4, 0, 20))
    values = [0.25 / (1 + math.exp(10 - i)) for i in range(20)]  # a rise onto the constant answer's 0.25
    ended = "ValueError at lr 1: a; b"
    found = _judged(rlnb.AdamParams(), lrs, Measured(values, ended=ended), "reward", "adam", None, None, None, 0.25)
    assert found.suggestion is not None and found.chosen == "steepest ascent of the smoothed reward"
    assert found.ended == ended and found.at_chance == at_chance(found.smoothed, 0.25) and found.at_chance
    assert found.reason == f"{found.chosen}; {found.at_chance}; ended early: {ended}"  # the joined text for people
    said = Suggestion.describe(found, "", [])
    assert f"— {found.chosen} ({found.at_chance}) (ended early: {ended}); the upper edge" in said
    whole = _judged(rlnb.AdamParams(), lrs, Measured(values), "reward", "adam", None, None, None, None)
    assert whole.ended is None and whole.at_chance is None and whole.reason == whole.chosen
    assert f"— {whole.chosen}; the upper edge" in Suggestion.describe(whole, "", [])
