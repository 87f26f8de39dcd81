"""Muon's lr units as the form says them: the preset's line names the rate sent, a rate that cannot be converted is
said in the form, a round trip between the units gives back the rate typed, and a builder given to a second panel
takes that session's units. Driven through ``.value`` and ``.click()``."""

import html
import math
import threading

import pytest
import torch

import rlnb
from rlnb.params.schedule import rate
from rlnb.sweep import convert_muon_lr
from rlnb.sweep.lr.muon import muon_lr_factor
from rlnb.widgets import OptimizerBuilder, RunPanel
from rlnb.widgets.presets import PRESETS

pytestmark = pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot


def test_the_presets_line_names_the_muon_rate_the_form_sends_in_match_adam_units():
    """On match_adam units the line said "Muon lr 0.05" while the form (and the summary) sent 0.0248."""
    b = OptimizerBuilder("muon")
    assert "Muon lr 0.05, AdamW 0.002" in b.lesson.value
    b.lr_finder.scaling.value = "match_adam"
    sent = b.params.learning_rate
    assert sent == convert_muon_lr(0.05, "original", "match_adam", "tiny") and not b.modified
    said = html.unescape(b.lesson.value)
    assert f"Muon lr {rate(sent)} (0.05 in original units), AdamW 0.002" in said and "Muon lr 0.05," not in said
    b.lr_finder.scaling.value = "original"
    assert "Muon lr 0.05, AdamW 0.002" in b.lesson.value


@pytest.mark.parametrize("typed", [math.inf, math.nan, -1.0])
def test_a_muon_rate_that_cannot_be_converted_is_said_in_the_form_not_raised(typed):
    """inf, then "Muon lr units" switched: ValueError from the dropdown's observer (in a notebook, the kernel's log
    only), the units switched and the rate not converted, without a word in the form."""
    b = OptimizerBuilder("muon")
    b.muon["learning_rate"].value = typed
    b.lr_finder.scaling.value = "match_adam"
    said = html.unescape(b.lr_finder.status.value)
    assert f"Muon lr {typed:g} was not converted to match_adam units" in said and "finite rate > 0" in said
    assert b.lr_finder.scaling.value == "match_adam" and not b.valid
    assert any("learning_rate" in e for e in b.errors)
    b.muon["learning_rate"].value = 0.02  # typed in match_adam units: sent as it is
    assert b.valid and b.params.learning_rate == 0.02


@pytest.mark.parametrize("typed", [0.0123, 0.05, 0.3, 5e-324, 1.7e308])
def test_units_switched_there_and_back_give_back_the_rate_typed(typed):
    """0.0123 came back 0.012300000000000002 (the summary and the body carried it); 5e-324, 0 in match_adam units
    (refused), came back 0: the rate typed was lost."""
    b = OptimizerBuilder("muon")
    lr = b.muon["learning_rate"]
    lr.value = typed
    b.lr_finder.scaling.value = "match_adam"
    there = lr.value
    assert there == typed * muon_lr_factor("original", "match_adam", "tiny")
    if not (math.isfinite(there) and there > 0):  # beyond a float: refused, naming the field, and said
        with pytest.raises(ValueError, match="no rate a float can hold"):
            convert_muon_lr(typed, "original", "match_adam", "tiny")  # the function refuses; the form shows it
        assert not b.valid and any("learning_rate" in e for e in b.errors)
        assert "beyond a float" in html.unescape(b.lr_finder.status.value)
    b.lr_finder.scaling.value = "original"
    assert lr.value == typed and b.params.learning_rate == typed
    b.lr_finder.scaling.value = "match_adam"
    lr.value = 0.02  # a rate of the person's own, typed in match_adam units: converted, not the one remembered
    b.lr_finder.scaling.value = "original"
    assert lr.value == convert_muon_lr(0.02, "match_adam", "original", "tiny")


@pytest.mark.slow  # two tiny local sessions made
@pytest.mark.parametrize("first, second", [("original", "match_adam"), ("match_adam", "original")])
def test_a_builder_given_to_a_second_muon_panel_takes_that_sessions_units(first, second):
    """After a panel on an original-units session, a panel on a match_adam one given the same builder kept the
    dropdown on "original" and sent the preset's 0.05 unconverted (about twice its step size), saying nothing; the
    other order sent 0.0248 to an original session."""
    made = {u: rlnb.connect("local", optimizer="muon", muon_scaling=u, record=False, device="cpu") for u in UNITS}
    sent: list[float] = []
    b = OptimizerBuilder("muon")
    older = RunPanel(made[first], b, step_fn=lambda s, p: sent.append(p.learning_rate), n_steps=1)
    newer = RunPanel(made[second], b, step_fn=lambda s, p: sent.append(p.learning_rate), n_steps=1)
    try:
        preset = {u: convert_muon_lr(0.05, "original", u, "tiny") if u != "original" else 0.05 for u in UNITS}
        assert b.lr_finder.scaling.value == second and b.lr_finder.scaling.disabled
        assert ("(0.05 in original units)" in b.lesson.value) == (second == "match_adam")
        assert older.step_button.disabled and f"{second} units)" in older.status.value  # the form is in other units
        newer.step_button.click()
        assert newer.join(30) and newer.error is None and sent == [pytest.approx(preset[second], rel=1e-12)]
        newer.close()  # the builder goes back to the older panel, in its session's units
        assert b.lr_finder.scaling.value == first
        older.step_button.click()
        assert older.join(30) and older.error is None and sent[-1] == pytest.approx(preset[first], rel=1e-12)
    finally:
        older.close()
        newer.close()
        for s in made.values():
            s.close()


UNITS = ("original", "match_adam")


@pytest.mark.slow  # two tiny local sessions made
def test_a_run_going_keeps_its_sessions_units_when_its_builder_is_given_to_a_panel_in_other_units():
    """A run on an original-units session took the form's rate converted for a match_adam panel given its builder
    mid-run as an edit: its next steps were sent 0.0248, half the preset's step size."""
    made = {u: rlnb.connect("local", optimizer="muon", muon_scaling=u, record=False, device="cpu") for u in UNITS}
    sent: list[float] = []
    go = threading.Event()
    b = OptimizerBuilder("muon")
    older = RunPanel(made["original"], b, step_fn=lambda s, p: go.wait(30) and sent.append(p.learning_rate))
    try:
        older.n.value = 3
        older.run_button.click()
        newer = RunPanel(made["match_adam"], b, step_fn=lambda s, p: None)
        said = older.status.value
        go.set()
        assert older.join(30) and older.error is None and sent == [0.05, 0.05, 0.05]
        assert "its builder belongs to the RunPanel on session" in said and "the run goes on with its config" in said
        newer.close()
    finally:
        go.set()
        older.close()
        for s in made.values():
            s.close()


class NoMatrices(torch.nn.Module):
    """An LM-shaped module whose one matrix is its embedding (Adam's): no Muon matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.b = torch.nn.Embedding(256, 16), torch.nn.Parameter(torch.zeros(256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.emb(x) @ self.emb.weight.T + self.b


NO_MATRICES = "this model has no Muon matrices: Muon lr updates nothing"


def test_a_model_with_no_muon_matrices_has_nothing_to_convert_and_its_presets_still_apply():
    """The switch raised "no Muon matrices to convert for" from the dropdown's observer (the kernel's log only), the
    line stayed empty, and every preset picked after it raised, the dropdown on it and the form on the old values."""
    b = OptimizerBuilder("muon", model=NoMatrices())
    b.lr_finder.scaling.value = "match_adam"
    assert b.lr_finder.scaling.value == "match_adam" and b.muon["learning_rate"].value == 0.05  # factor 1
    assert NO_MATRICES in html.unescape(b.lr_finder.status.value)
    b.preset.value = "Together docs"
    assert b.muon["learning_rate"].value == PRESETS["Together docs"]["muon"]["learning_rate"] and b.valid
    assert "preset Together docs" in b.fold.get_title(0)


def test_a_panel_builds_on_a_muon_session_whose_matrices_all_go_to_adam(undrawn_live_view):
    """RunPanel(s) raised ValueError: no Muon matrices to convert for."""
    with rlnb.connect("local", optimizer="muon", record=False, muon_scaling="match_adam",
                      muon_split=lambda name, p: "adam") as s:  # fmt: skip
        panel = RunPanel(s)
        try:
            assert panel.builder.lr_finder.scaling.value == "match_adam"
            assert NO_MATRICES in html.unescape(panel.builder.lr_finder.status.value)
            assert panel.builder.params.learning_rate == 0.05
        finally:
            panel.close()
