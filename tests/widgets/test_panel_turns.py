"""A builder given to several RunPanels, Find LR's turns beside their runs, and what the status line says around
them: driven as a person would, through `.value` and `.click()`, on sessions of ``FakeBackend``."""

import re
import threading

import pytest

import rlnb
import rlnb.sweep
from rlnb.tasks import digits_task
from rlnb.testing import FakeBackend
from rlnb.widgets import OptimizerBuilder, RunPanel, turns
from rlnb.widgets.find_probe import probe, step_options

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

RED = "#b00020"
RUN = "a run of another RunPanel is going on this session (was its cell run again?); Stop ends it"
FINDER = "another RunPanel's Find LR is running on this session; wait for it"


def text(widget) -> str:
    return re.sub(r"<[^>]+>", "", widget.value)


@pytest.fixture
def sessions():
    made = [rlnb.Session(FakeBackend(kind), record=False) for kind in ("adam", "adam", "muon")]
    yield made
    for s in made:
        s.close()


@pytest.fixture
def blocking():
    """A step_fn that waits for ``release`` (set at the test's end at the latest)."""
    release = threading.Event()
    yield release, (lambda s, p: release.wait(30) and None)
    release.set()


@pytest.fixture
def found(monkeypatch):
    """``lr_find`` replaced: records the session and task of each range test, which waits for ``release``."""
    release, calls = threading.Event(), []
    monkeypatch.setattr(rlnb.sweep, "lr_find", lambda p, s, **k: calls.append((s, k.get("task"))) or release.wait(30))
    yield release, calls
    release.set()


def test_closing_an_older_panel_leaves_find_lr_waiting_for_the_newer_ones_run(sessions, blocking):
    """The panel cell run twice with one builder, then the old panel closed: close() cleared the hooks the new
    panel had set, and Find LR, enabled during the new panel's run, checkpointed the session and trained beside it."""
    s = sessions[0]
    release, step = blocking
    b = OptimizerBuilder()
    old, new = RunPanel(s, b, every=0.05), RunPanel(s, b, step_fn=step, every=0.05)
    old.close()
    assert new.start(1)
    assert b.lr_finder.button.disabled and "Find LR waits: a run is going on this session" in b.lr_finder.status.value
    b.lr_finder.button.click()
    assert not b.lr_finder.running
    release.set()
    assert new.join(60) and not b.lr_finder.button.disabled
    new.close()


def test_find_lr_waits_for_the_run_of_every_open_panel_given_its_builder(sessions, blocking, found):
    """``p1 = RunPanel(s1, b); p2 = RunPanel(s2, b)``: Find LR (p2's session now) stayed enabled while p1 ran."""
    s1, s2, _ = sessions
    release, step = blocking
    b = OptimizerBuilder()
    p1, p2 = RunPanel(s1, b, step_fn=step, every=0.05), RunPanel(s2, b, every=0.05)
    assert b.panel is p2 and b.lr_finder.session is s2
    assert p1.start(1)
    assert b.lr_finder.button.disabled and "a run is going on another session" in b.lr_finder.status.value
    release.set()
    assert p1.join(60) and not b.lr_finder.button.disabled
    b.lr_finder.button.click()  # the range test goes: p1, given the builder too, waits for it
    assert b.lr_finder.running and p1.step_button.disabled and p2.step_button.disabled
    found[0].set()
    assert b.lr_finder.join(30) and found[1][0][0] is s2 and not p1.step_button.disabled
    p2.close()  # p1 holds the builder again: its session, its task
    assert b.panel is p1 and b.lr_finder.session is s1 and probed_task(b) is p1.task
    p1.close()


def test_a_builder_given_to_a_new_panel_probes_that_panels_task(sessions):
    s1, s2, _ = sessions
    b = OptimizerBuilder()
    RunPanel(s1, b, every=0.05).close()
    q = RunPanel(s2, b, task=digits_task(), every=0.05)  # the first panel's task stayed Find LR's
    assert probed_task(b) is q.task and probe(step_options(b, b.lr_finder.options, None)) == "the digits task"
    q.close()
    assert probed_task(b) is None and "task" not in b.lr_finder.options  # a builder on its own: lr_find's default
    mine = rlnb.tasks.addition_task()
    b.lr_finder.options["task"] = mine  # the person's own choice stays
    RunPanel(s1, b, every=0.05).close()
    assert b.lr_finder.options["task"] is mine and probed_task(b) is mine


def probed_task(b: OptimizerBuilder):
    """The task the next range test of ``b``'s Find LR is given."""
    return step_options(b, b.lr_finder.options, None).get("task")


def test_a_builder_whose_panel_closed_is_free_of_its_session(sessions, found):
    """After its panel closed, the builder stayed locked to the dead Muon session: the Adam tab refused, and Find
    LR failed SessionClosed, although the docs say it can be shown again."""
    muon = sessions[2]
    b = OptimizerBuilder("adam")
    RunPanel(muon, b, every=0.05).close()
    muon.close()
    assert b.locked is None and b.panel is None and b.lr_finder.session is None
    assert (b.tabs.get_title(0), b.tabs.get_title(1)) == ("Adam", "Muon")
    assert not b.adam["learning_rate"].disabled and not b.lr_finder.scaling.disabled
    b.kind = "adam"
    assert b.valid, b.errors
    found[0].set()
    b.lr_finder.button.click()
    assert b.lr_finder.join(30) and not isinstance(b.lr_finder.error, rlnb.SessionClosed)
    assert found[1] == [(None, None)]  # a fresh local session, lr_find's own task


def test_an_older_panel_whose_builder_a_panel_on_another_optimizer_holds_waits_saying_so(sessions):
    """The Adam panel said "ready", Step on, while a Muon panel held the builder: a click was refused with "pass
    AdamParams, not MuonParams", which the person never passed, and that line stayed after the builder came back."""
    adam, _, muon = sessions
    sent: list[str] = []
    b = OptimizerBuilder("adam")
    older = RunPanel(adam, b, step_fn=lambda s, p: sent.append(type(p).__name__), every=0.05)
    newer = RunPanel(muon, b, step_fn=lambda s, p: sent.append(type(p).__name__), every=0.05)
    why = f"its builder belongs to the RunPanel on session {muon.id} (muon, original units): close that panel"
    assert text(older.status).startswith(f"step 0 · waits: {why}")
    assert older.step_button.disabled and older.run_button.disabled and older.stop_button.disabled
    assert older.start(1) is False and why in text(older.status) and sent == []
    newer.step_button.click()
    assert newer.join(30) and sent == ["MuonParams"]
    newer.close()  # the builder comes back to the Adam panel, which says so
    assert text(older.status) == "step 0 · ready" and not older.step_button.disabled
    older.step_button.click()
    assert older.join(30) and older.error is None and sent == ["MuonParams", "AdamParams"]
    older.close()


def test_the_status_says_ready_again_once_find_lr_has_ended(sessions, found):
    panel = RunPanel(sessions[0], every=0.05)
    panel.builder.lr_finder.button.click()
    assert panel.start(1) is False
    assert "not started: this panel's Find LR is running on this session" in panel.status.value
    found[0].set()
    assert panel.builder.lr_finder.join(30)
    assert "step 0 · ready" in panel.status.value and RED not in panel.status.value
    panel.close()


def test_a_second_click_during_a_run_leaves_the_run_its_line_and_error(sessions, blocking):
    """Step clicked twice: the refusal set ``error`` (RuntimeError) over a run that then succeeded, and the line
    turned red mid-run."""
    release, step = blocking
    panel = RunPanel(sessions[0], step_fn=step, every=0.05)
    panel.step_button.click()
    assert panel.start(1) is False  # what a second click does
    assert panel.error is None and RED not in panel.status.value and "running" in panel.status.value
    release.set()
    assert panel.join(60) and panel.error is None and "1 done" in panel.status.value
    panel.close()


def test_a_panel_on_a_closed_session_says_so_with_its_buttons_off():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    s.close()
    panel = RunPanel(s, every=0.05)
    assert "is closed: connect a new one" in panel.status.value and RED in panel.status.value
    assert panel.step_button.disabled and panel.run_button.disabled and panel.builder.lr_finder.button.disabled
    assert "is closed" in panel.builder.lr_finder.status.value
    panel.n.value = 3
    assert "is closed" in panel.status.value and panel.run_button.disabled
    panel.close()


def test_join_has_a_deadline_by_default(sessions, blocking):
    from rlnb.widgets.panel import JOIN_DEADLINE

    release, step = blocking
    panel = RunPanel(sessions[0], step_fn=step, every=0.05)
    assert RunPanel.join.__defaults__ == (JOIN_DEADLINE,) and 0 < JOIN_DEADLINE < 3600
    with pytest.raises(ValueError, match="timeout"):
        panel.join(float("inf"))
    assert panel.start(1) and panel.join(0.05) is False
    release.set()
    assert panel.join() and panel.builder.lr_finder.join()
    panel.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_waiting_line_says_the_current_reason_when_it_changes(sessions, blocking, found, monkeypatch):
    """``a`` waits for ``b``'s run; that run ends and ``c``'s Find LR starts before ``b``'s end has reached ``a`` (the
    run's thread redraws the other panels after it has ended): ``a`` kept naming the run, which had ended, its Step off
    for a reason it did not say."""
    s = sessions[0]
    release, step = blocking
    a, b, c = RunPanel(s, every=0.05), RunPanel(s, step_fn=step, every=0.05), RunPanel(s, every=0.05)
    ended, go_on, follow = threading.Event(), threading.Event(), turns.follow

    def late(panel):
        if panel is b and not b.running:  # b's run has ended: its redraw of the others comes late
            ended.set()
            assert go_on.wait(30)
        follow(panel)

    monkeypatch.setattr(turns, "follow", late)
    assert b.start(1) and text(a.status) == f"step 0 · waits: {RUN}"
    release.set()
    assert ended.wait(30)
    c.builder.lr_finder.button.click()
    assert c.builder.lr_finder.running and text(a.status) == f"step 0 · waits: {FINDER}" and a.step_button.disabled
    go_on.set()
    assert b.join(30) and text(a.status) == f"step 0 · waits: {FINDER}"
    found[0].set()
    assert c.builder.lr_finder.join(30) and text(a.status) == "step 0 · ready" and not a.step_button.disabled
    for p in (a, b, c):
        p.close()


def test_find_lr_of_a_builder_on_another_session_leaves_this_sessions_other_panels_free(sessions, blocking, found):
    """Builder ``bld`` given to ``given`` (session s1), then ``holder`` (s2): its Find LR copies s2. Panel ``a`` on s1
    said "ready", Step on, and refused a start ("another RunPanel's Find LR is running on this session"), a line it
    kept after the range test had ended."""
    s1, s2, _ = sessions
    release, step = blocking
    bld = OptimizerBuilder()
    a = RunPanel(s1, step_fn=step, every=0.05)
    given, holder = RunPanel(s1, bld, every=0.05), RunPanel(s2, bld, every=0.05)
    bld.lr_finder.button.click()
    assert bld.lr_finder.running and given.step_button.disabled and holder.step_button.disabled  # their builder's test
    assert text(a.status) == "step 0 · ready" and not a.step_button.disabled
    assert a.start(1) and a.error is None  # s1 is not the session the range test copies
    release.set()
    assert a.join(30) and a.error is None and text(a.status) == "step 0 · 1 done"
    found[0].set()
    assert bld.lr_finder.join(30) and found[1][0][0] is s2 and text(a.status) == "step 0 · 1 done"
    for p in (a, given, holder):
        p.close()


def test_while_its_own_find_lr_runs_the_panels_line_says_so_then_ready(sessions, found):
    """It said "step 0 · ready" all the test long, Step and Run disabled: folded, or started from code, nothing said
    why they were grey."""
    p = RunPanel(sessions[0])
    p.builder.lr_finder.button.click()
    assert p.builder.lr_finder.running and p.step_button.disabled and not p.stop_button.disabled
    assert text(p.status) == "step 0 · Find LR is running (Stop ends it)"
    found[0].set()
    assert p.builder.lr_finder.join(30) and text(p.status) == "step 0 · ready" and not p.step_button.disabled
    p.close()


def test_a_builders_own_find_lr_given_to_a_panel_mid_test_is_said_to_run_on_a_fresh_session(sessions, found):
    """The panel refused a Step with "Find LR is running on this session", of a test that ran on a fresh local
    session (the builder's own, started before any panel had it)."""
    b = OptimizerBuilder("adam")
    b.lr_finder.button.click()
    assert b.lr_finder.running
    panel = RunPanel(sessions[0], b, step_fn=lambda s, p: None, every=0.05)
    try:
        assert panel.start(1) is False
        fresh = "this panel's Find LR is running on a fresh session (it shares the CPU); wait for it"
        assert str(panel.error) == fresh and text(panel.status) == f"not started: {fresh}"
        assert found[1] == [(None, None)]  # it did run on a fresh session
    finally:
        found[0].set()
        b.lr_finder.join(30)
        panel.close()
