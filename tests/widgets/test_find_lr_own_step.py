"""Find LR on a RunPanel given ``step_fn``: the Find LR button, clicked, probes the panel's own step function on a
copy of the session (it probed the first_letter RL task: a suggestion for another training), following the reward
it returns, else its step's loss; a step function with neither is refused, saying why and how. Real widgets on a
local tiny-model session."""

import threading

import pytest

import rlnb
from rlnb import samples
from rlnb.widgets import RunPanel

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

TOKENS = list(b"the digits 0123456789 and more text")


@pytest.fixture
def session():
    s = rlnb.connect("local", optimizer="adam", record=False, device="cpu")
    yield s
    s.close()


def recording(returns):
    """A real cross-entropy step that records the session, rate and loss of each call, returning ``returns(loss)``."""
    calls = []

    def step_fn(session, params):
        fb = session.forward_backward([samples.cross_entropy(TOKENS)])
        session.optim_step(params).result()
        loss = fb.result().loss
        calls.append((session, params.learning_rate, loss))
        return returns(loss)

    return step_fn, calls


def probed(panel, **options):
    finder = panel.builder.lr_finder
    finder.options.update(options)
    finder.button.click()
    assert finder.join(120)
    return finder


@pytest.mark.parametrize("returns", [lambda loss: None, lambda loss: {"accuracy": 0.5}, lambda loss: {"reward": -loss}])
def test_find_lr_on_a_step_fn_panel_probes_that_step_fn_on_a_copy(session, returns):
    """Its reward if it returns one, else its step's loss (a step_fn cannot return "loss": a steps-table column)."""
    step_fn, calls = recording(returns)
    panel = RunPanel(session, step_fn=step_fn, every=0.05)
    panel.step_button.click()  # the panel learns what the step_fn returns
    assert panel.join(60) and panel.error is None and session.step == 1
    calls.clear()
    finder = probed(panel, steps=6, start_lr=1e-4, end_lr=1e-2)
    result, name = finder.result, "reward" if "reward" in (returns(1.0) or {}) else "loss"
    assert finder.error is None and result.objective == name
    assert len(calls) == 6 and all(s is not session for s, *_ in calls)  # on a copy, the session untouched
    assert session.step == 1 and len(session.history.steps) == 1
    assert [lr for _, lr, _ in calls] == pytest.approx(result.lrs)
    sign = -1 if name == "reward" else 1
    assert result.values == pytest.approx([sign * loss for *_, loss in calls])  # its figures, not the RL task's
    assert f"your step_fn&#x27;s {name}" in finder.status.value
    panel.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_step_fn_not_stepped_yet_is_probed_by_its_loss_or_told_to_step_for_its_reward(session):
    step_fn, calls = recording(lambda loss: None)
    panel = RunPanel(session, step_fn=step_fn, every=0.05)
    finder = probed(panel, steps=5)
    assert finder.error is None and len(calls) == 5 and finder.result.objective == "loss" and session.step == 0
    panel.close()
    step_fn, calls = recording(lambda loss: {"reward": 1 - loss})
    panel = RunPanel(session, step_fn=step_fn, every=0.05)
    finder = probed(panel, steps=5)
    assert isinstance(finder.error, TypeError) and len(calls) == 1  # ended at its first step, saying why and how
    assert "your step_fn returns a &#x27;reward&#x27;: click Step once" in finder.status.value
    finder = probed(panel, objective="reward")
    assert finder.error is None and len(calls) == 6 and finder.result.objective == "reward"
    panel.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_before_the_panels_first_step_the_line_says_the_loss_it_follows_is_a_guess(session):
    """ "range test of your step_fn's loss running …" said as known what was only guessed (the panel had never stepped,
    what its step_fn returns unknown): one returning a reward then failed the test at its first step."""
    step_fn, calls = recording(lambda loss: None)
    first, go = threading.Event(), threading.Event()

    def held(s, p):  # the range test's first step waits for the test's word
        if not calls:
            first.set()
            assert go.wait(60)
        return step_fn(s, p)

    panel = RunPanel(session, step_fn=held, every=0.05)
    finder = panel.builder.lr_finder
    finder.options["steps"] = 5
    finder.button.click()
    assert first.wait(60)
    said = finder.status.value
    assert said.startswith("range test of your step_fn&#x27;s loss (a guess: the panel has not stepped, so what your "
                           "step_fn returns is not known yet; its first step here checks, and one that returns a "
                           "&#x27;reward&#x27; ends the test) running")  # fmt: skip
    go.set()
    assert finder.join(120) and finder.error is None and len(calls) == 5
    assert "a guess" not in finder.status.value and "your step_fn&#x27;s loss" in finder.status.value  # it was checked
    panel.step_button.click()  # the panel has stepped: what its step_fn returns is known, no guess said
    assert panel.join(60) and panel.error is None
    first.clear()
    go.clear()
    calls.clear()
    finder.button.click()
    assert first.wait(60) and finder.status.value.startswith("range test of your step_fn&#x27;s loss running")
    go.set()
    assert finder.join(120) and finder.error is None
    panel.close()


def no_loss(session, params) -> None:
    """A step with no forward-backward: nothing to minimise, nothing returned to maximise."""
    session.optim_step(params).result()


@pytest.mark.parametrize("returns", [None, {"accuracy": 0.5}])
def test_find_lr_refuses_a_step_fn_with_nothing_to_follow(session, returns):
    panel = RunPanel(session, step_fn=lambda s, p: no_loss(s, p) or returns, every=0.05)
    finder = panel.builder.lr_finder
    panel.step_button.click()
    assert panel.join(60) and panel.error is None
    finder.button.click()
    assert finder._thread is None and isinstance(finder.error, ValueError)  # no range test, of any task
    said = finder.status.value
    assert "Find LR cannot probe your step_fn: its last step returns no &#x27;reward&#x27; figure and its step " in said
    assert "set builder.lr_finder.options[&#x27;step_fn&#x27;] to a function step_fn(session, params, i)" in said
    assert session.step == 1 and not finder.button.disabled and not panel.step_button.disabled
    with pytest.raises(ValueError, match="Find LR cannot probe your step_fn"):
        finder.run()  # from a cell too
    panel.close()


def test_a_step_fn_with_no_loss_not_stepped_yet_ends_the_test_at_its_first_step(session):
    panel = RunPanel(session, step_fn=no_loss, every=0.05)
    finder = probed(panel, steps=5)
    assert isinstance(finder.error, TypeError) and session.step == 0
    assert "Find LR cannot probe your step_fn: it returns no &#x27;reward&#x27; figure" in finder.status.value
    panel.close()


def test_options_step_fn_still_wins_over_the_panels(session):
    step_fn, calls = recording(lambda loss: None)
    panel = RunPanel(session, step_fn=step_fn, every=0.05)
    mine = []

    def own(s, p, i):
        mine.append(i)
        return float(i)

    finder = probed(panel, steps=5, step_fn=own)
    assert finder.error is None and mine == [0, 1, 2, 3, 4] and calls == []
    assert "(your step_fn)" in finder.status.value or "on your step_fn " in finder.status.value
    panel.close()


@pytest.mark.slow  # a range test of 5 RL steps on a copy
def test_a_task_the_person_set_wins_over_the_panels_step_fn(session):
    """``lr_finder.options["task"]`` set by the person on a step_fn panel was dropped in silence: the test probed the
    panel's step_fn. As a step_fn the person set there, it wins; the panel's step_fn is not called."""
    from rlnb.tasks import digits_task

    step_fn, calls = recording(lambda loss: None)
    panel = RunPanel(session, step_fn=step_fn, every=0.05)
    finder = probed(panel, steps=5, task=digits_task())
    assert finder.error is None and len(finder.result.values) == 5 and calls == []
    assert "the digits task" in finder.status.value
    panel.close()


def test_a_task_and_a_step_fn_the_person_set_are_refused_naming_both(session):
    """Both in ``lr_finder.options``: ``lr_find``'s refusal, said in the status line (the task was dropped)."""
    from rlnb.tasks import digits_task

    panel = RunPanel(session, step_fn=recording(lambda loss: None)[0], every=0.05)
    finder = probed(panel, steps=5, task=digits_task(), step_fn=lambda s, p, i: 0.0)
    assert isinstance(finder.error, ValueError) and "task= and step_fn= both say" in finder.status.value
    panel.close()
