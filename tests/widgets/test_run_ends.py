"""However a run or a range test ends, its buttons are back no later than its status line says it ended: the line
said "stopped: ..." while the run's last redraw went on, Step and Run still disabled, and a click straight after
reading it hit a disabled button. Widgets driven through ``.value``, ``.disabled`` and ``.click()``; the order seen
by observers, which run as a value is set, on the thread that sets it (as the front end gets the changes)."""

import re
import threading
import time

import pytest

import rlnb
import rlnb.sweep
from rlnb import samples
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel, turns

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

DEADLINE = 60.0


def wait_for(what) -> None:
    end = time.monotonic() + DEADLINE
    while not what():
        assert time.monotonic() < end, "not reached before the deadline"
        time.sleep(0.01)


def text(value: str) -> str:
    return re.sub(r"<[^>]+>", "", value)


class Said:
    """Each value ``line`` takes, with which of ``buttons`` could be clicked as it was set."""

    def __init__(self, line, **buttons) -> None:
        self.seen: list[tuple[str, dict[str, bool]]] = []
        self._buttons = buttons
        line.observe(self._changed, names="value")

    def _changed(self, change) -> None:
        self.seen.append((text(change["new"]), {k: not b.disabled for k, b in self._buttons.items()}))

    def first(self, pattern: str) -> dict[str, bool]:
        """Which buttons were usable when the line first said ``pattern`` (a regular expression)."""
        for said, usable in self.seen:
            if re.search(pattern, said):
                return usable
        raise AssertionError(f"never said {pattern!r}: {[s for s, _ in self.seen]}")


@pytest.fixture
def fake():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    yield s
    s.close()


@pytest.fixture
def local():
    s = rlnb.connect("local", model="tiny", optimizer="adam", record=False, device="cpu")
    yield s
    s.close()


def watched(panel: RunPanel) -> Said:
    return Said(panel.status, step=panel.step_button, run=panel.run_button, stop=panel.stop_button)


def raising(exc: BaseException):
    def step_fn(_session, _params):
        raise exc

    return step_fn


def after(go: threading.Event, step_fn):
    """``step_fn``, called once ``go`` is set: the run's start has disabled the buttons by then (a step that ended at
    once could end the run before the start had)."""

    def gated(session, params):
        if not go.wait(DEADLINE):
            raise TimeoutError("the test let no step go")
        return step_fn(session, params)

    return gated


@pytest.mark.parametrize(
    ("step_fn", "ended"),
    [
        (lambda s, p: {"x": 1.0}, r"^step 0 · 2 done$"),
        (raising(ValueError("my reward function broke")), r"stopped: ValueError — my reward function broke"),
        (raising(KeyboardInterrupt()), r"stopped: KeyboardInterrupt"),
        (raising(SystemExit(2)), r"stopped: SystemExit — 2"),
    ],
    ids=["done", "failed", "interrupted", "exited"],
)
def test_step_and_run_are_back_when_the_line_says_the_run_ended(fake, step_fn, ended):
    go = threading.Event()
    panel = RunPanel(fake, step_fn=after(go, step_fn), n_steps=2, every=0.05)
    said = watched(panel)
    panel.run_button.click()
    assert panel.step_button.disabled and panel.run_button.disabled
    go.set()
    assert panel.join(DEADLINE) and not panel.running
    assert said.first(ended) == {"step": True, "run": True, "stop": False}
    assert re.search(ended, text(panel.status.value))  # and it still says so
    panel.close()


def test_step_and_run_are_back_when_the_line_says_a_stopped_run_ended(fake):
    go = threading.Event()
    panel = RunPanel(fake, step_fn=after(go, lambda s, p: panel.stop()), n_steps=3, every=0.05)
    said = watched(panel)
    panel.run_button.click()
    go.set()
    assert panel.join(DEADLINE)
    assert said.first(r"stopped early after 1 of 3$") == {"step": True, "run": True, "stop": False}
    panel.close()


def test_the_panel_that_waited_is_usable_when_it_says_ready(fake):
    """The other panel on the session says "ready" again when the run ends: its Step was enabled after."""
    go = threading.Event()
    first = RunPanel(fake, step_fn=lambda s, p: go.wait(DEADLINE) and None, every=0.05)
    assert first.start(1)
    second = RunPanel(fake, step_fn=lambda s, p: None, every=0.05)
    assert "waits" in text(second.status.value) and second.step_button.disabled
    said = watched(second)
    go.set()
    assert first.join(DEADLINE)
    assert said.first(r"step 0 · ready$") == {"step": True, "run": True, "stop": False}
    first.close()
    second.close()


def test_n_fixed_says_ready_with_run_enabled(fake):
    panel = RunPanel(fake, step_fn=lambda s, p: None, every=0.05)
    panel.n.value = 0
    assert panel.run_button.disabled
    said = watched(panel)
    panel.n.value = 3
    assert said.first(r"ready$")["run"]
    panel.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_click_as_step_comes_back_starts_a_run_the_line_then_says(fake):
    """Step clicked the moment it is enabled, before the ended run's end is over: that end then enabled Run during
    the new run, or (said after the buttons) overwrote the new run's "running" line with its error, for the whole
    first step of the new run."""
    started, go, clicked = threading.Event(), threading.Event(), []
    steps = iter([after(started, raising(ValueError("boom"))), lambda s, p: go.wait(DEADLINE) and None])
    panel = RunPanel(fake, step_fn=lambda s, p: next(steps)(s, p), every=0.05)

    def click_when_back(change) -> None:
        if change["new"] is False and not clicked:
            clicked.append(threading.Thread(target=panel.step_button.click))
            clicked[0].start()
            clicked[0].join(0.5)  # a person's click lands while the ended run still draws: here it waits for it

    panel.step_button.observe(click_when_back, names="disabled")
    assert panel.start(1)
    started.set()
    try:
        wait_for(lambda: clicked)
        clicked[0].join(DEADLINE)
        assert panel.running and text(panel.status.value) == "running: 0/1 done …"
        assert panel.step_button.disabled and panel.run_button.disabled and not panel.stop_button.disabled
    finally:
        go.set()
    assert panel.join(DEADLINE) and "1 done" in text(panel.status.value)
    panel.close()


def finder_watched(panel: RunPanel) -> Said:
    finder = panel.builder.lr_finder
    return Said(finder.status, find=finder.button, step=panel.step_button, run=panel.run_button)


def test_find_lr_failed_is_said_once_every_button_is_back(fake):
    panel = RunPanel(fake, step_fn=lambda s, p: {"reward": 0.5}, every=0.05)
    assert panel.start(1) and panel.join(DEADLINE)
    said = finder_watched(panel)
    panel.builder.lr_finder.options["task"] = None  # probes the step_fn; the run before said what it returns
    panel.builder.lr_finder.button.click()  # a FakeBackend session cannot be copied: the test fails, saying why
    assert panel.builder.lr_finder.join(DEADLINE)
    assert said.first(r"✗ ValueError: lr_find copies a session") == {"find": True, "step": True, "run": True}
    panel.close()


def ce_step(session, params):
    session.forward_backward([samples.cross_entropy(list(b"a step"))])
    session.optim_step(params).result()
    return {"reward": 0.0}


@pytest.mark.parametrize("stop", [False, True], ids=["done", "stopped"])
@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_find_lr_result_is_said_once_every_button_is_back(local, stop):
    panel = RunPanel(local, step_fn=ce_step, every=0.05)
    assert panel.start(1) and panel.join(DEADLINE)
    finder = panel.builder.lr_finder
    finder.options.update(steps=5, start_lr=1e-4, end_lr=1e-2)
    if stop:
        finder.options["progress"] = lambda done, total: panel.stop()
    said = finder_watched(panel)
    finder.button.click()
    assert finder.join(DEADLINE) and finder.error is None
    ended = text(finder.status.value)
    assert ("ended early: stopped" in ended) is stop
    assert said.first("^" + re.escape(ended) + "$") == {"find": True, "step": True, "run": True}
    panel.close()


@pytest.mark.parametrize("button", ["step_button", "run_button"])
def test_step_and_run_are_off_when_the_line_says_the_run_started(fake, button):
    """The reverse of the end's order: the line said "running: 0/N done …" while Step and Run were still enabled."""
    go = threading.Event()
    panel = RunPanel(fake, step_fn=after(go, lambda s, p: None), n_steps=2, every=0.05)
    said = watched(panel)
    getattr(panel, button).click()
    go.set()
    assert panel.join(DEADLINE)
    assert said.first(r"^running: 0/\d done …$") == {"step": False, "run": False, "stop": True}
    panel.close()


class Ending:
    """A panel's ``_ending`` lock that knows which threads hold it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.holders: list[threading.Thread] = []

    def __enter__(self) -> None:
        self._lock.acquire()
        self.holders.append(threading.current_thread())

    def __exit__(self, *_exc) -> None:
        self.holders.pop()
        self._lock.release()


class Busy(threading.Event):
    """A panel's ``_busy``: ``then`` runs once, on the test's thread, right after that thread next reads it."""

    then = None

    def is_set(self) -> bool:
        value = super().is_set()
        if self.then is not None and threading.current_thread() is threading.main_thread():
            then, self.then = self.then, None
            then()
        return value


def test_stop_as_the_run_ends_leaves_the_line_saying_how_it_ended(fake):
    """Stop read that a run was going, the run then ended (its line said so), and Stop's "stopping after this step …"
    stayed, under a run that had ended. Here the run ends right after Stop reads it going, unless Stop holds the
    panel's ``_ending`` lock then, which the run's end must take to say it ended."""
    go = threading.Event()
    panel = RunPanel(fake, step_fn=after(go, lambda s, p: {"x": 1.0}), n_steps=2, every=0.05)
    panel._busy, panel._ending = Busy(), Ending()
    assert panel.start(2)

    def the_run_ends() -> None:
        go.set()
        if threading.current_thread() not in panel._ending.holders:  # else its end waits for this Stop
            assert panel.join(DEADLINE)
            assert text(panel.status.value) == "step 0 · stopped early after 1 of 2"

    panel._busy.then = the_run_ends
    panel.stop()
    assert panel._busy.then is None  # Stop read whether the run went
    assert panel.join(DEADLINE)
    assert text(panel.status.value) == "step 0 · stopped early after 1 of 2"
    panel.close()


class Follow:
    """``turns.follow`` that raises at its ``fail``-th call from now (1: the next one), as a bug in it or in a panel's
    ``_sync_buttons`` would."""

    def __init__(self, monkeypatch, fail: int) -> None:
        self.calls, self.fail = 0, fail
        self._follow = turns.follow
        monkeypatch.setattr(turns, "follow", self)

    def __call__(self, panel) -> None:
        self.calls += 1
        if self.calls == self.fail:
            raise RuntimeError("follow broke")
        self._follow(panel)


def test_a_start_whose_buttons_fail_says_why_and_leaves_the_panel_usable(fake, monkeypatch):
    """The start marked the panel running, then ``follow`` raised: no thread, the panel said "running" for ever (or
    its last line), Step and Run off and every later start refused ("a run is going; Stop it first")."""
    panel = RunPanel(fake, step_fn=lambda s, p: {"x": 1.0}, n_steps=2, every=0.05)
    Follow(monkeypatch, fail=1)
    panel.run_button.click()  # the error goes to the line and ``error``, not to the front end's log
    assert not panel.running and panel.join(0.05)  # no run to wait for
    assert isinstance(panel.error, RuntimeError) and str(panel.error) == "follow broke"
    assert text(panel.status.value) == "not started: RuntimeError — follow broke"
    assert not panel.step_button.disabled and not panel.run_button.disabled and panel.stop_button.disabled
    assert panel.start(2) and panel.join(DEADLINE)  # follow works again: the panel runs
    assert text(panel.status.value) == "step 0 · 2 done" and panel.error is None
    panel.close()


@pytest.mark.parametrize(
    ("step_fn", "ended"),
    [
        (lambda s, p: {"x": 1.0}, "step 0 · 2 done"),
        (raising(ValueError("boom")), "step 0 · stopped: ValueError — boom"),
    ],
    ids=["done", "failed"],
)
def test_a_run_whose_end_fails_to_bring_the_buttons_back_says_so_with_them_back(fake, monkeypatch, step_fn, ended):
    """The run's end raised in ``follow``: the line kept saying the last step's progress, Step and Run stayed off, and
    the error went to the thread's excepthook only."""
    go = threading.Event()
    panel = RunPanel(fake, step_fn=after(go, step_fn), n_steps=2, every=0.05)
    assert panel.start(2)
    Follow(monkeypatch, fail=1)  # the end's
    said = watched(panel)
    go.set()
    assert panel.join(DEADLINE) and not panel.running
    line = f"{ended} · then its buttons failed: RuntimeError — follow broke"
    assert said.first("^" + re.escape(line) + "$") == {"step": True, "run": True, "stop": False}
    assert text(panel.status.value) == line
    first = panel.error  # the step's error, else the end's
    assert str(first) == ("boom" if "boom" in ended else "follow broke")
    assert panel.start(2) and panel.join(DEADLINE) and text(panel.status.value) == ended  # follow works again
    panel.close()


@pytest.mark.parametrize(
    ("button", "stop", "kernel", "script"),
    [
        ("step_button", None, False, True),  # a Step that ends: the browser decides (the person may have moved on)
        ("step_button", "click", True, False),  # a click on Stop: the person is at the panel
        ("run_button", "click", True, False),
        ("run_button", None, False, False),  # a Run N that ends by itself: no focus
        ("run_button", "code", False, False),  # stopped from code (another panel's start): not a person at this one
        ("step_button", "code", False, True),
    ],
)
def test_the_focus_goes_back_to_the_button_that_started_the_run_after_a_step_or_a_stop(
    fake, monkeypatch, button, stop, kernel, script
):
    """The click moved the focus to Stop; as the run ended Stop was disabled and a keyboard's focus fell to the page
    (the browser's side: tests/widgets/test_browser_narrow.py, test_browser_focus.py). A click on Stop says the person
    is at the panel: the kernel gives the focus back. A Step on a slow model can end after the person moved to another
    cell, which ``focus()`` took it from: the browser moves it only from nothing or the panel (``focus_back``). A Run
    N that ends by itself, or is stopped from code, moves none. ``start()`` from code moves no focus, at either end."""
    go = threading.Event()
    panel = RunPanel(fake, step_fn=after(go, lambda s, p: None), n_steps=2, every=0.05)
    focused, sent = [], []
    for name in ("step_button", "run_button", "stop_button"):
        b = getattr(panel, name)
        monkeypatch.setattr(b, "focus", lambda name=name, b=b: focused.append((name, b.disabled)))
    panel.focus_back.widget.observe(lambda change: sent.append(change["new"]), names="outputs")
    getattr(panel, button).click()
    assert focused == [("stop_button", False)]
    if stop == "click":
        panel.stop_button.click()
    elif stop == "code":
        panel.stop()
    go.set()
    assert panel.join(DEADLINE)
    assert focused == [("stop_button", False)] + ([(button, False)] if kernel else [])  # once it is enabled
    assert len(sent) == script
    if script:
        (output,) = sent[0]
        assert f"button.{panel.focus_back.mark}" in output["data"]["application/javascript"]
        assert panel.focus_back.mark in panel.step_button._dom_classes
    panel.stop_button.click()  # between runs (a Find LR's Stop): the next run's end is not its
    assert panel.start(1) and panel.join(DEADLINE)
    assert len(focused) == 1 + kernel and len(sent) == script
    panel.close()


def watched_finder(fake, monkeypatch, lr_find):
    """A RunPanel whose Find LR runs ``lr_find``; the kernel's ``focus()`` calls on Find LR and Stop (name, disabled)
    and the browser scripts Find LR sends (``focus_back``), each kept in a list."""
    monkeypatch.setattr(rlnb.sweep, "lr_find", lr_find)
    panel = RunPanel(fake, every=0.05)
    finder, focused, sent = panel.builder.lr_finder, [], []
    for name, b in (("find", finder.button), ("stop", panel.stop_button)):
        monkeypatch.setattr(b, "focus", lambda name=name, b=b: focused.append((name, b.disabled)))
    finder.focus_back.widget.observe(lambda change: sent.append(change["new"]), names="outputs")
    return panel, finder, focused, sent


def test_a_range_test_that_ends_at_once_leaves_no_stop_handler_behind(fake, monkeypatch):
    """The Stop handler was added after the test started: one that ended first removed nothing, the handler stayed,
    and every later click on Stop made the next test that ended by itself take the focus from the kernel. Here the
    test ends while the click moves the focus to Stop, as a quick one may."""
    go = threading.Event()

    def lr_find(*_args, **_kwargs):
        go.wait(DEADLINE)
        raise ValueError("no range test here")

    panel, finder, focused, sent = watched_finder(fake, monkeypatch, lr_find)
    monkeypatch.setattr(panel.stop_button, "focus", lambda: (go.set(), finder.join(DEADLINE)))
    finder.button.click()
    assert finder.join(DEADLINE)
    assert finder._stop_clicked not in panel.stop_button._click_handlers.callbacks
    panel.close()


def test_the_focus_goes_back_to_find_lr_as_its_range_test_ends(fake, monkeypatch):
    """A click on Find LR moved the focus to the panel's Stop, disabled again when the test ended: it fell to the
    page. Find LR's ``focus()`` took it back from wherever it was, a cell the person had moved on to included: the
    browser is asked to move it only from nothing or the panel (``focus_back``: its side in
    tests/widgets/test_browser_focus.py), once per test a click started; a test started from code asks nothing."""
    go = threading.Event()

    def lr_find(*_args, **_kwargs):
        go.wait(DEADLINE)
        raise ValueError("no range test here")

    panel, finder, focused, sent = watched_finder(fake, monkeypatch, lr_find)
    finder.button.click()
    assert focused == [("stop", False)] and sent == []
    go.set()
    assert finder.join(DEADLINE) and "no range test here" in finder.status.value
    assert focused == [("stop", False)]  # not moved from the kernel: it cannot see where the focus is
    assert len(sent) == 1
    (output,) = sent[0]
    assert f"button.{finder.focus_back.mark}" in output["data"]["application/javascript"]
    assert finder.focus_back.mark in finder.button._dom_classes and not finder.button.disabled
    finder.start()
    assert finder.join(DEADLINE) and len(sent) == 1 and focused == [("stop", False)]
    panel.close()


def test_a_range_test_ended_by_stop_gives_find_lr_the_focus_from_the_kernel(fake, monkeypatch):
    """A click on Stop says the person is at the panel: Find LR takes the focus back from the kernel, as a RunPanel's
    Step and Run do after a Stop, also in a front end that runs no script output (no ``focus_back`` is sent). A stop
    from code (another panel's start) is not a person at this panel: the browser decides then."""
    started, go = threading.Event(), threading.Event()

    def lr_find(*_args, **kwargs):
        started.set()
        go.wait(DEADLINE)
        raise ValueError("no range test here")

    panel, finder, focused, sent = watched_finder(fake, monkeypatch, lr_find)
    finder.button.click()
    assert started.wait(DEADLINE)
    panel.stop_button.click()
    go.set()
    assert finder.join(DEADLINE)
    assert focused == [("stop", False), ("find", False)] and sent == []
    started.clear(), go.clear(), focused.clear()
    finder.button.click()
    assert started.wait(DEADLINE)
    panel.stop()  # what another panel's start does (``turns.stop_others``): the person is at that one
    go.set()
    assert finder.join(DEADLINE)
    assert focused == [("stop", False)] and len(sent) == 1  # the browser decides, as for a test that ended itself
    panel.close()


def test_after_a_step_fn_raises_past_its_optim_step_the_lines_say_the_sessions_step():
    """The step_fn's optim-step ran, then its own code raised: the lines said step 1 (and the schedule's rate for step
    1) while the session was at 2, until the next run re-read it."""
    s = rlnb.Session(FakeBackend("adam"), record=False)

    def step(session, params):
        session.optim_step(params).result()
        if session.step == 2:
            raise RuntimeError("plotting my metrics failed")
        return {}

    p = RunPanel(s, step_fn=step)
    p.builder.sched_kind.value, p.builder.total.value = "linear", 4
    p.n.value = 5
    p.run_button.click()
    assert p.join(DEADLINE) and s.step == 2
    assert text(p.status.value).startswith("step 2 · stopped: RuntimeError")
    assert text(p.schedule_line.value).startswith("step 3 / 4 of the linear schedule")
    p.close()
    s.close()
