"""Find LR quotes what its suggestion did held 40 steps (``EDGE``) only for the range test measured:
``first_letter_task()`` on ``tiny``, 30 steps over ``lr_find``'s default range, from a session at the step measured
(Adam: fresh; Muon: notebook 05's 6 steps). It quoted it for any task named first_letter, any model, range or steps,
and a trained session (review42b F2). Real widgets; ``lr_find`` stands in (the words are what is tested), except
where a real session is trained to the step measured."""

import html

import pytest

import rlnb
from rlnb import sweep, wire
from rlnb.params import AdamParams
from rlnb.sweep.lr.find import LRFind
from rlnb.tasks import first_letter_task
from rlnb.widgets import OptimizerBuilder, RunPanel
from rlnb.widgets.suggestion import EDGE, Suggestion

MEASURED = "held constant for 40 steps, "
NOT = "what it does held constant for 40 steps on the first_letter task is not measured for "


@pytest.fixture
def seen(monkeypatch):
    """``lr_find`` replaced: the options each test got, and a suggestion of 0.02 in the optimizer tested."""
    got: list[dict] = []

    def fake_lr_find(base, session, **options):
        got.append(options)
        muon = isinstance(base, rlnb.MuonParams)
        return LRFind([1e-3, 1e-2], [0.0, 1.0], [0.0, 1.0], 0.02, "reward", wire.MUON if muon else wire.ADAM,
                      wire.MUON_ORIGINAL if muon else None, "steepest ascent of the smoothed reward", None, None,
                      base)  # fmt: skip

    monkeypatch.setattr(sweep, "lr_find", fake_lr_find)
    return got


def said(finder) -> str:
    return html.unescape(finder.status.value)


def test_the_measured_setup_quotes_the_figure(seen):
    finder = OptimizerBuilder("adam").lr_finder  # alone: a fresh local session of tiny
    finder.options = {"steps": 30, "task": first_letter_task()}
    finder.run()
    assert said(finder).endswith(f"which Apply sets: {MEASURED}{EDGE[wire.ADAM].learns}. Sweep below it")


@pytest.mark.parametrize(
    ("options", "model", "unlike"),
    [
        ({"task": first_letter_task(alphabet="abcdefgh", length=3)}, "tiny",
         "this first_letter task (not first_letter_task()'s)"),
        ({}, "small", "this model"),
        ({"steps": 5}, "tiny", "this range or number of steps"),
        ({"start_lr": 1e-3, "end_lr": 10.0}, "tiny", "this range or number of steps"),
        ({"range_test": sweep.RangeTestOptions(steps=30, end_lr=10.0)}, "tiny", "this range or number of steps"),
        ({"steps": 40}, "small", "this model or this range or number of steps"),
    ],
)  # fmt: skip
def test_another_task_model_range_or_steps_is_not_measured(seen, options, model, unlike):
    finder = OptimizerBuilder("adam", model=model).lr_finder
    steps = {} if "range_test" in options else {"steps": 30}  # the group's steps, not the name's
    finder.options = {**steps, "task": first_letter_task(), **options}
    finder.run()
    assert "seeds 0-9" not in said(finder) and said(finder).endswith(f"{NOT}{unlike}. Sweep below it"), said(finder)


@pytest.mark.parametrize(
    ("kind", "edit", "options", "unlike"),
    [
        ("adam", {"weight_decay": 0.1}, {}, "weight decay 0.1"),
        ("adam", {}, {"seed": 9}, None),  # seeds 0-9 measured, each a fresh session of its own seed
        ("adam", {}, {"seed": 10}, "seed 10"),
        ("adam", {}, {"range_test": sweep.RangeTestOptions(steps=30, seed=12)}, "seed 12"),
        ("adam", {"weight_decay": 0.01}, {"seed": 42}, "weight decay 0.01 or seed 42"),
        ("muon", {"adam.learning_rate": 0.01}, {}, "a session at step 0 or AdamW at 0.2× Muon's rate"),
        ("muon", {}, {}, "a session at step 0"),
    ],
)  # fmt: skip
def test_another_weight_decay_adamw_ratio_or_seed_is_not_measured(seen, kind, edit, options, unlike):
    """The words quoted the figure for any weight decay (Adam's measured 0), any AdamW rate beside Muon's (0.04×
    measured) and any seed (0-9 measured): each is said, through the form's own fields."""
    b = OptimizerBuilder(kind)
    for field, value in edit.items():
        group, _, name = field.rpartition(".")
        (b.muon_adam if group else b.adam if kind == "adam" else b.muon)[name].value = value
    finder = b.lr_finder
    finder.options = {"steps": 30 if kind == "adam" else 40, "task": first_letter_task(), **options}
    if "range_test" in options:
        del finder.options["steps"]
    finder.run()
    if unlike is None:
        assert said(finder).endswith(f"which Apply sets: {MEASURED}{EDGE[kind].learns}. Sweep below it"), said(finder)
    else:
        assert said(finder).endswith(f"{NOT}{unlike}. Sweep below it"), said(finder)


@pytest.mark.slow  # a real tiny session
@pytest.mark.parametrize(("seed", "options", "unlike"), [(3, {"seed": 3}, None), (3, {}, "seed 0"),
                                                         (11, {"seed": 11}, "a session of seed 11")])  # fmt: skip
def test_a_copied_adam_sessions_seed_is_the_range_tests_as_measured(seen, seed, options, unlike):
    """Adam's figures are of fresh sessions whose range test had the session's own seed: a session at step 0 copied
    with another range-test seed, or a session of a seed not measured, is not that setup."""
    with rlnb.connect("local", model="tiny", optimizer="adam", seed=seed, device="cpu", record=False) as session:
        panel = RunPanel(session, OptimizerBuilder("adam"))
        finder = panel.builder.lr_finder
        finder.options = {"steps": 30, "task": first_letter_task(), **options}
        finder.run()
        panel.close()
    if unlike is None:
        words = said(finder)
        assert words.endswith(f"which Apply sets: {MEASURED}{EDGE[wire.ADAM].learns}. Sweep below it"), words
    else:
        assert said(finder).endswith(f"{NOT}{unlike}. Sweep below it"), said(finder)


def test_lr_finds_own_default_steps_are_not_the_widgets(seen):
    """``lr_find`` alone runs 40 steps: options set whole without ``steps`` are not the 30 measured."""
    finder = OptimizerBuilder("adam").lr_finder
    finder.options = {"task": first_letter_task()}
    finder.run()
    assert said(finder).endswith(f"{NOT}this range or number of steps. Sweep below it")


def test_another_task_is_named_once(seen):
    finder = OptimizerBuilder("adam").lr_finder  # lr_find's default, the digits task
    finder.run()
    assert said(finder).endswith("on the digits task is not measured. Sweep below it")
    finder.options = {"steps": 5}
    finder.run()
    assert said(finder).endswith("on the digits task is not measured for this range or number of steps. Sweep below it")


def test_describe_gives_the_figure_only_for_the_setup_measured():
    """``unlike`` (``unlike_edge``'s words, required) empty: the figure; anything in it: "not measured for" it."""
    adam = AdamParams(learning_rate=0.019)
    found = LRFind([0.01], [0.0], [0.0], 0.019, "reward", "adam", None, "steepest ascent", None, None, adam)
    assert Suggestion.describe(found, "the first_letter task", ["a session at step 3"]).endswith(
        "on the first_letter task is not measured for a session at step 3. Sweep below it"
    )
    assert Suggestion.describe(found, "the first_letter task", []).endswith(f"{EDGE[wire.ADAM].learns}. Sweep below it")


@pytest.mark.slow  # real tiny sessions trained 1 and 6 steps (a few seconds)
@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
@pytest.mark.parametrize(("kind", "steps", "measured"), [("adam", 1, False), ("muon", 6, True), ("muon", 1, False)])
def test_a_panels_session_at_the_step_measured(seen, kind, steps, measured):
    """A RunPanel's test copies its session: Adam's figure is of a fresh one, Muon's of notebook 05's after 6 steps
    (and a 40-step test: bench_find_lr's ``--notebook05`` set the finder's options whole, so ``lr_find``'s default 40);
    a session at another step is not measured, nor Muon's at the widget's own 30 steps."""
    with rlnb.connect("local", model="tiny", optimizer=kind, seed=0, device="cpu", record=False, threads=1) as session:
        panel = RunPanel(session, OptimizerBuilder(kind, total_steps=40), n_steps=40)
        panel.n.value = steps
        panel.run_button.click()
        assert panel.join(600) and panel.error is None, panel.error
        assert session.step == steps
        finder = panel.builder.lr_finder
        finder.options = {"steps": 40 if kind == "muon" else 30}
        finder.run()
        words = said(finder)
        if measured:
            finder.options = {"steps": 30}  # the widget's default: Muon's figure is of 40-step tests
            finder.run()
            assert said(finder).endswith(f"{NOT}this range or number of steps. Sweep below it"), said(finder)
        panel.close()
    assert seen[-1]["task"].name == "first_letter"
    if measured:
        assert words.endswith(f"which Apply sets: {MEASURED}{EDGE[kind].learns}. Sweep below it"), words
    else:
        assert words.endswith(f"{NOT}a session at step {steps}. Sweep below it"), words
