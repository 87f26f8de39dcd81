"""A RunPanel used as a hostile (or hurried) person would: joined the moment it says it runs, stopped from another
panel, interrupted mid-start, joined from its own step, its session closed under it, closed twice. ``join()`` waits
for the run that ``running`` reports, from its first moment: a run is running (its buttons off, its line saying so)
before its thread exists, and a join then returned True at once (a notebook cell, or Voila, that joins once
``running``). Real widgets and threads, on ``FakeBackend``."""

import re
import threading
import types

import pytest

import rlnb
import rlnb.sweep
from rlnb.testing import FakeBackend
from rlnb.widgets import OptimizerBuilder, RunPanel, finder

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

DEADLINE = 60.0


@pytest.fixture
def fake():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    yield s
    s.close()


def in_thread(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_join_waits_for_a_run_whose_thread_is_not_made_yet(fake, monkeypatch):
    """The start says "running" on the status line before it starts the run's thread: held there, the run is
    ``running`` and ``join`` must not say it ended (it returned True: no thread yet, or the last run's, ended)."""
    steps: list[int] = []
    panel = RunPanel(fake, step_fn=lambda s, p: steps.append(1), n_steps=1, every=0.05)
    said, go = threading.Event(), threading.Event()
    show_run = panel.line.show_run

    def held(line=None):
        if line is not None and line.startswith("running: 0/"):
            said.set()
            assert go.wait(DEADLINE), "the test let the start go on"
        show_run(line)

    monkeypatch.setattr(panel.line, "show_run", held)
    starting = in_thread(lambda: panel.start(1))
    assert said.wait(DEADLINE) and panel.running
    assert panel.join(0.05) is False  # the run reported has not ended: it has not even started its steps
    assert steps == []
    go.set()
    assert panel.join(DEADLINE) and steps == [1] and not panel.running
    starting.join(DEADLINE)
    panel.close()


def test_find_lr_join_waits_for_a_range_test_whose_thread_is_not_made_yet(fake, monkeypatch):
    """Find LR is ``running`` from before its thread is made: ``join`` then returned True at once."""
    tests: list[int] = []
    monkeypatch.setattr(
        rlnb.sweep, "lr_find", lambda *a, **k: tests.append(1) or (_ for _ in ()).throw(ValueError("x"))
    )
    panel = RunPanel(fake, every=0.05)
    lr = panel.builder.lr_finder
    made, go = threading.Event(), threading.Event()

    def thread(*args, **kwargs):
        if kwargs.get("name") == "rlnb-lr-find":
            made.set()
            assert go.wait(DEADLINE), "the test let the start go on"
        return threading.Thread(*args, **kwargs)

    monkeypatch.setattr(finder, "threading", types.SimpleNamespace(**{**vars(threading), "Thread": thread}))
    clicking = in_thread(lr.button.click)
    assert made.wait(DEADLINE) and lr.running
    assert lr.join(0.05) is False and tests == []
    go.set()
    assert lr.join(DEADLINE) and tests == [1] and not lr.running
    clicking.join(DEADLINE)
    panel.close()


def test_find_lr_whose_thread_cannot_start_says_so_and_is_not_left_running(fake, monkeypatch):
    """A thread that cannot start (the process out of threads) left Find LR ``running`` for good, and ``join``
    waiting for a test that never began."""

    def thread(*_args, **_kwargs):
        raise RuntimeError("can't start new thread")

    panel = RunPanel(fake, every=0.05)
    lr = panel.builder.lr_finder
    monkeypatch.setattr(finder, "threading", types.SimpleNamespace(**{**vars(threading), "Thread": thread}))
    lr.button.click()
    assert not lr.running and lr.join(1.0) and isinstance(lr.error, RuntimeError)
    assert "not started: RuntimeError: can&#x27;t start new thread" in lr.status.value
    assert not lr.button.disabled and not panel.step_button.disabled
    panel.close()


def gated(started: threading.Event, go: threading.Event):
    def step_fn(*_args, **_kwargs):
        started.set()
        if not go.wait(DEADLINE):
            raise TimeoutError("the test let no step go")
        raise ValueError("no range test here")

    return step_fn


@pytest.mark.slow  # two panels, each run ended: over a second on a loaded machine
@pytest.mark.parametrize("what", ["step", "find_lr"])
def test_a_click_on_another_panels_stop_leaves_the_focus_at_that_panel(fake, monkeypatch, what):
    """``a``'s Step (or Find LR), clicked, is ended by a click on ``b``'s Stop (``b``: the same cell run again, or
    another cell on the session). ``b``'s Stop, disabled as that run ends, dropped the focus to the page, and ``a``'s
    browser script, finding it on nothing, took it to ``a``'s Step: the panel the person was not at (out of sight, up
    the notebook). The person is at ``b``: its Step takes it, as a panel's own Stop gives it to its own button."""
    started, go = threading.Event(), threading.Event()
    monkeypatch.setattr(rlnb.sweep, "lr_find", gated(started, go))
    a = RunPanel(fake, step_fn=gated(started, go), every=0.05)
    b = RunPanel(fake, step_fn=lambda s, p: None, every=0.05)
    focused, sent = [], []
    for name, panel in (("a", a), ("b", b)):
        for part in ("step_button", "stop_button", "run_button"):
            button = getattr(panel, part)
            monkeypatch.setattr(button, "focus", lambda n=f"{name}.{part}", x=button: focused.append((n, x.disabled)))
        for back in (panel.focus_back, panel.builder.lr_finder.focus_back):
            back.widget.observe(lambda change, n=name: sent.append(n), names="outputs")
    (a.step_button if what == "step" else a.builder.lr_finder.button).click()
    assert started.wait(DEADLINE) and focused == [("a.stop_button", False)]
    assert not b.stop_button.disabled  # it can stop a's run: a's cell may be out of sight
    b.stop_button.click()
    go.set()
    assert a.join(DEADLINE) and a.builder.lr_finder.join(DEADLINE)
    assert focused == [("a.stop_button", False), ("b.step_button", False)] and sent == []
    a.close(), b.close()


def test_a_start_interrupted_in_the_kernel_leaves_the_panel_usable(fake, monkeypatch):
    """An interrupt (the kernel's stop button) that lands in the start, after it marked the panel running and before
    the run's thread starts, left it running for good: no thread to end it, every later start refused ("a run is
    going; Stop it first"), Step and Run off, ``join`` waiting its whole deadline. The interrupt goes on up."""
    steps: list[int] = []
    panel = RunPanel(fake, step_fn=lambda s, p: steps.append(1), n_steps=1, every=0.05)
    show_run = panel.line.show_run

    def interrupted(line=None):
        if line is not None and line.startswith("running: 0/"):
            raise KeyboardInterrupt
        show_run(line)

    monkeypatch.setattr(panel.line, "show_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        panel.start(1)
    assert not panel.running and panel.join(1.0) and steps == []
    assert re.sub("<[^>]+>", "", panel.status.value) == "not started: KeyboardInterrupt"  # no dash to no message
    assert not panel.step_button.disabled and not panel.run_button.disabled and panel.stop_button.disabled
    monkeypatch.undo()
    assert panel.start(1) and panel.join(DEADLINE) and steps == [1]
    panel.close()


def test_a_find_lr_start_interrupted_in_the_kernel_leaves_it_usable(fake, monkeypatch):
    """As a panel's start: Find LR was left running for good, with no thread, and its button off."""
    tests: list[int] = []
    monkeypatch.setattr(rlnb.sweep, "lr_find", lambda *a, **k: tests.append(1))
    panel = RunPanel(fake, every=0.05)
    lr = panel.builder.lr_finder

    def thread(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(finder, "threading", types.SimpleNamespace(**{**vars(threading), "Thread": thread}))
    with pytest.raises(KeyboardInterrupt):
        lr.button.click()
    assert not lr.running and lr.join(1.0) and tests == []
    assert not lr.button.disabled and not panel.step_button.disabled
    # nor is the click's Stop handler left behind (every later Stop then took the focus for a test ended by itself)
    assert lr._stop_clicked not in panel.stop_button._click_handlers.callbacks
    panel.close()


def test_join_from_the_runs_own_step_is_refused_not_waited_for(fake, monkeypatch):
    """A step (or a close in it) that joins its own run would wait for itself until the deadline (600 s by
    default), the run and the kernel's later joins with it: it is refused at once, and the run says so."""
    panel = RunPanel(fake, step_fn=lambda s, p: panel.join(1.0) and None, n_steps=1, every=0.05)
    assert panel.start(1) and panel.join(DEADLINE)
    assert isinstance(panel.error, RuntimeError) and "own step" in str(panel.error)
    lr = panel.builder.lr_finder
    lr.options["step_fn"] = lambda s, p, i: lr.join(1.0) and 0.0
    monkeypatch.setattr(rlnb.sweep, "lr_find", lambda base, session, **k: k["step_fn"](session, base, 0))
    lr.start()
    assert lr.join(DEADLINE) and isinstance(lr.error, RuntimeError) and "own step" in str(lr.error)
    panel.close()


def test_a_session_closed_under_a_run_stops_it_saying_so(monkeypatch):
    """``session.close()`` in another cell mid-run: a step function that does not itself call the session went on
    for every step left on the closed session, and the line said `20 done` while Step and Run were off (the session is
    closed), no reason given."""
    started, go = threading.Event(), threading.Event()
    steps: list[int] = []

    def step_fn(_session, _params):
        steps.append(1)
        started.set()
        assert go.wait(DEADLINE), "the test let the step go"

    s = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(s, step_fn=step_fn, n_steps=5, every=0.05)
    panel.run_button.click()
    assert started.wait(DEADLINE)
    s.close()
    go.set()
    assert panel.join(DEADLINE) and steps == [1]
    said = re.sub("<[^>]+>", "", panel.status.value)
    assert said == f"step 0 · stopped: SessionClosed — session {s.id} is closed: connect a new one to train", said
    assert panel.step_button.disabled and panel.run_button.disabled and panel.stop_button.disabled
    panel.close()
    panel.close()  # a second close is nothing (it raised ValueError from the history's list of followers)


@pytest.mark.slow  # two panels, each run ended: over a second on a loaded machine
@pytest.mark.parametrize("what", ["step", "find_lr"])
def test_the_last_stop_clicked_says_where_the_person_is(fake, monkeypatch, what):
    """``b``'s Stop clicked, then ``a``'s own (the person went back to ``a``): the focus goes back to ``a``'s button, as
    after any click on ``a``'s Stop, not to ``b``'s Step."""
    started, go = threading.Event(), threading.Event()
    monkeypatch.setattr(rlnb.sweep, "lr_find", gated(started, go))
    a = RunPanel(fake, step_fn=gated(started, go), every=0.05)
    b = RunPanel(fake, step_fn=lambda s, p: None, every=0.05)
    focused = []
    for name, button in (("a.step", a.step_button), ("a.find", a.builder.lr_finder.button), ("b.step", b.step_button)):
        monkeypatch.setattr(button, "focus", lambda n=name: focused.append(n))
    monkeypatch.setattr(a.stop_button, "focus", lambda: None)
    (a.step_button if what == "step" else a.builder.lr_finder.button).click()
    assert started.wait(DEADLINE)
    b.stop_button.click()
    a.stop_button.click()
    go.set()
    assert a.join(DEADLINE) and a.builder.lr_finder.join(DEADLINE)
    assert focused == ["a.step" if what == "step" else "a.find"]
    a.close(), b.close()


@pytest.mark.parametrize("value", ["tensor", "fraction"])
def test_a_figure_that_history_log_takes_is_said_in_the_status_line_not_a_failure(fake, value):
    """A step function returning ``{"acc": torch.tensor([0.5])}`` (a one-element tensor, as ``mean(keepdim=True)``
    gives) or a ``Fraction``: ``history.log`` takes it as 0.5, then the status line's ``:.3g`` raised ``TypeError:
    unsupported format string passed to Tensor.__format__`` and the run ended as failed after its first step."""
    import fractions

    import torch

    given = torch.tensor([0.5]) if value == "tensor" else fractions.Fraction(1, 2)

    def step(session, params):
        session.forward_backward([rlnb.samples.cross_entropy(list(b"ab"))])
        session.optim_step(params).result()
        return {"acc": given}

    panel = RunPanel(fake, step_fn=step, every=0.05)
    assert panel.start(2) and panel.join(DEADLINE)
    assert panel.error is None and fake.step == 2
    assert "step 2 · 2 done" in panel.status.value and panel.returned == ("acc",)
    assert fake.history.logged.acc.tolist() == [0.5, 0.5]
    panel.close()


@pytest.mark.parametrize("session", [None, "local", rlnb.AdamParams()])
def test_a_panel_given_no_session_is_refused_naming_session(session):
    """``RunPanel(None)`` raised ``AttributeError: 'NoneType' object has no attribute 'optimizer'``."""
    with pytest.raises(TypeError, match=r"session must be an rlnb Session \(rlnb\.connect\(\.\.\.\)\), got "):
        RunPanel(session)


def test_a_panel_whose_builder_is_closed_says_so_its_step_and_run_off(fake):
    """``builder.close()`` took the form off the page while the panel said "ready", Step on, and its runs went on
    sending the closed form's config."""
    sent = []
    builder = OptimizerBuilder("adam")
    panel = RunPanel(fake, builder, step_fn=lambda s, p: sent.append(p), every=0.05)
    builder.close()
    why = "its OptimizerBuilder is closed: make a new RunPanel (with a new OptimizerBuilder) to train"
    assert re.sub(r"<[^>]+>", "", panel.status.value) == why and "#b00020" in panel.status.value
    assert panel.step_button.disabled and panel.run_button.disabled and panel.stop_button.disabled
    assert panel.start(1) is False and why in panel.status.value and sent == []
    assert isinstance(panel.error, ValueError)
    with pytest.raises(ValueError, match=r"builder is closed: pass a new OptimizerBuilder, or none"):
        RunPanel(fake, builder)
    panel.close()


def test_a_run_whose_builder_is_closed_mid_run_ends_saying_why_its_buttons_are_off(fake):
    """The builder closed during a run: the run's last line ("step 0 · 2 done") replaced the reason its Step and Run
    are off for good, in normal colour, nothing on screen saying why."""
    builder = OptimizerBuilder("adam")
    sent: list = []

    def step_fn(s, p):
        sent.append(p)
        if len(sent) == 1:
            builder.close()  # from another cell, while the run goes

    panel = RunPanel(fake, builder, step_fn=step_fn, n_steps=2, every=0.05)
    panel.run_button.click()
    assert panel.join(DEADLINE) and panel.error is None and len(sent) == 2
    said = re.sub(r"<[^>]+>", "", panel.status.value)
    why = "its OptimizerBuilder is closed: make a new RunPanel (with a new OptimizerBuilder) to train"
    assert said.startswith("step 0 · 2 done") and said.endswith(why), said  # its own step_fn: no optim-step
    assert panel.step_button.disabled and panel.run_button.disabled and panel.stop_button.disabled
    panel.close()
