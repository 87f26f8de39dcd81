"""A preset's lesson is measured on one task and one model: ``first_letter_task()`` on the built-in ``tiny``
(``lesson.train``, bench_lessons.py). A panel on another task, a step_fn of the person's or another model showed the
lesson unmarked, as if it spoke for that run (lessons39's "not done"). Widgets driven through ``.value``; the
panels are real, on real sessions (local ``tiny`` and ``small``, and the fake backend's pretend model)."""

import html
import re

import pytest

import rlnb
from rlnb.tasks import digits_task, first_letter_task
from rlnb.testing import FakeBackend
from rlnb.widgets import OptimizerBuilder, RunPanel
from rlnb.widgets.presets import DEFAULT_PRESET, MEASURED_MODEL

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

TASK, MODEL, STEP_FN = (f"not measured for {w}" for w in ("this task", "this model", "your step_fn"))


def shown(b: OptimizerBuilder) -> str:
    return html.unescape(re.sub(r"<[^>]*>", "", b.lesson.value))  # the line as read


def marked(b: OptimizerBuilder, why: str) -> bool:
    """The lesson line and the folded title both end with ``why``."""
    return shown(b).endswith(f"≥ 0.4 — {why}") and b.summary.endswith(f"preset {DEFAULT_PRESET} — lesson {why}")


def unmarked(b: OptimizerBuilder) -> bool:
    return "not measured" not in shown(b) + b.summary and shown(b).endswith("≥ 0.4")


@pytest.fixture(scope="module")
def tiny():
    s = rlnb.connect("local", optimizer="adam", model=MEASURED_MODEL, seed=0, device="cpu", record=False)
    yield s
    s.close()


def test_a_builder_on_its_own_is_judged_by_its_model():
    assert MEASURED_MODEL == "tiny"
    assert unmarked(OptimizerBuilder("adam", total_steps=40))
    b = OptimizerBuilder("muon", total_steps=40, model="small")
    assert marked(b, MODEL)
    b.sched_kind.value = "cosine"
    b.warmup.value = 3
    both = "not measured for this schedule or this model"
    assert shown(b).endswith(f"— {both}") and b.summary.endswith(f"— lesson {both}")


def test_a_panel_on_another_task_marks_the_lesson_and_letting_go_of_the_builder_clears_it(tiny):
    b = OptimizerBuilder("adam", total_steps=40)
    measured = RunPanel(tiny, b, task=first_letter_task(), n_steps=40)  # a task made afresh: the one measured still
    assert unmarked(b)
    measured.close()
    other = RunPanel(tiny, b, task=digits_task(), n_steps=40)
    assert marked(b, TASK)
    b.adam["beta1"].value = 0.8  # each reason is said
    assert shown(b).endswith("— not measured for these values (the preset's, modified) or this task")
    b.preset.value = DEFAULT_PRESET
    other.close()  # the builder is free again: on its own, on tiny
    assert unmarked(b)


def test_a_first_letter_task_of_other_letters_is_another_task(tiny):
    """Same name, eight letters: chance 1/8, not the task measured."""
    panel = RunPanel(tiny, task=first_letter_task(alphabet="abcdefgh"), n_steps=40)
    assert marked(panel.builder, TASK)
    panel.close()


def test_a_panel_of_your_own_step_fn_marks_the_lesson(tiny):
    panel = RunPanel(tiny, step_fn=lambda session, params: {"loss": 1.0}, n_steps=40)
    assert marked(panel.builder, STEP_FN)
    panel.close()


def test_a_panel_on_another_model_marks_the_lesson():
    small = rlnb.connect("local", optimizer="muon", model="small", seed=0, device="cpu", record=False)
    fake = rlnb.Session(FakeBackend("muon"), record=False)  # a pretend model: not tiny either
    try:
        b = OptimizerBuilder("muon", total_steps=40)
        for session in (small, fake):
            panel = RunPanel(session, b, n_steps=40)
            assert marked(b, MODEL)
            panel.close()
            assert unmarked(b)
    finally:
        small.close()
        fake.close()
