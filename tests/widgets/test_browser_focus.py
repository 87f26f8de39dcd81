"""Where Find LR's range test, or a RunPanel's Step, leaves the keyboard's focus as it ends by itself, in Debian's
Chromium through Voila: back on Find LR or Step when the person stayed at the panel (Stop, disabled again, dropped it
to the page), never taken from another cell they moved on to as the test or the step went on; a Step ended by another
panel's Stop leaves it at that panel.
"""

import os
import time
from pathlib import Path

import pytest

from rlnb.widgets.focus_back import REPLAY_S, SCRIPT
from tests.support.browser import CHROMIUM, voila

HERE = Path(__file__).parent

pytestmark = [
    pytest.mark.slow,  # a browser, a Voila server and its kernel
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (.ci/run installs it)"),
]


@pytest.fixture(scope="module")
def focus_url(browser):
    """focus_panel.ipynb in Voila: a RunPanel, its range tests of 5 steps, the first one starting once "go" is typed
    in a text box outside the panel (another cell), its steps once "step" is, and counts of the tests and the runs
    ended, each set after its last message."""
    with voila(HERE / "voila" / "focus_panel.ipynb") as url:
        yield url


def test_find_lr_gives_the_focus_back_only_to_a_person_still_at_the_panel(browser, focus_url):
    """Find LR moved the focus back to itself whenever a test it had moved to Stop ended: a test that ended by itself
    took the focus from the cell the person had moved on to, and their next Enter would start another range test."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    page.goto(focus_url, timeout=120_000)
    panel = page.locator(".rlnb-run-panel")
    expect(panel.locator(".rlnb-status")).to_contain_text("step 0 · ready", timeout=120_000)
    panel.locator("button[title='open or fold the optimizer form']").press("Enter")
    find, stop = panel.get_by_role("button", name="Find LR"), panel.get_by_role("button", name="Stop")
    other, ended = page.locator(".tests-other-cell input"), page.locator(".tests-ended")
    find.focus()
    page.keyboard.press("Enter")
    expect(stop).to_be_focused(timeout=30_000)
    other.click()  # the person moves on to another cell as the test goes on; typing "go" lets the test go on
    page.keyboard.type("go")
    expect(ended).to_have_text("1", timeout=180_000)  # after the test's last message: its focus, if any, is in
    expect(find).to_be_enabled()
    expect(other).to_be_focused(timeout=1)  # the person's cell kept it
    find.focus()  # the person stays at the panel: Stop, disabled as the test ends, drops the focus to the page
    page.keyboard.press("Enter")
    expect(ended).to_have_text("2", timeout=180_000)
    expect(find).to_be_focused(timeout=30_000)  # given back
    page.close()


def test_a_step_gives_the_focus_back_only_to_a_person_still_at_the_panel(browser, focus_url):
    """Step's end moved the focus back to Step from the kernel: a Step on a slow model, ending after the person had
    moved on to another cell, took the focus from it, and their next Enter would run another step."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    page.goto(focus_url, timeout=120_000)
    panel = page.locator(".rlnb-run-panel")
    expect(panel.locator(".rlnb-status")).to_contain_text("step 0 · ready", timeout=120_000)
    step, stop = panel.get_by_role("button", name="Step"), panel.get_by_role("button", name="Stop")
    other, ended = page.locator(".tests-other-cell input"), page.locator(".tests-runs-ended")
    step.focus()
    page.keyboard.press("Enter")
    expect(stop).to_be_focused(timeout=30_000)
    other.click()  # the person moves on to another cell as the step goes on; typing "step" lets it go on
    page.keyboard.type("step")
    expect(ended).to_have_text("1", timeout=180_000)  # after the run's end: its focus, if any, is in
    expect(step).to_be_enabled()
    expect(other).to_be_focused(timeout=1)  # the person's cell kept it
    step.focus()  # the person stays at the panel: Stop, disabled as the step ends, drops the focus to the page
    page.keyboard.press("Enter")
    expect(ended).to_have_text("2", timeout=180_000)
    expect(step).to_be_focused(timeout=30_000)  # given back
    page.close()


PAGE = """<div class='rlnb-run-panel'><input class='in-panel'><button class='find mark'>Find LR</button></div>
<input class='other-cell'>"""
"""A panel with Find LR (marked ``mark``) and a field, and another cell's field."""


@pytest.mark.parametrize(
    "at, sent_ago, disabled, to",
    [
        ("body", 0, False, "find mark"),  # Stop, disabled, dropped it to the page
        ("in-panel", 0, False, "find mark"),  # the person went on in the panel
        ("other-cell", 0, False, "other-cell"),  # or to another cell: it stays there
        ("body", REPLAY_S + 5, False, ""),  # the notebook reopened, the script drawn and run again
        ("body", 0, True, ""),  # Find LR disabled again (a run started): nothing focused
    ],
)
def test_the_script_moves_the_focus_only_from_nothing_or_the_panel_and_only_as_it_is_sent(
    browser, at, sent_ago, disabled, to
):
    page = browser.new_page()
    page.set_content(PAGE)
    if at != "body":
        page.focus(f".{at}")
    page.evaluate(f"document.querySelector('.find').disabled = {str(disabled).lower()}")
    sent = round((time.time() - sent_ago) * 1000)
    page.add_script_tag(content=SCRIPT % (sent, REPLAY_S * 1000, "mark"))  # run on the page, as the output is
    assert page.evaluate("document.activeElement.className") == to
    page.close()


def test_a_stop_on_another_panel_leaves_the_focus_at_that_panel(browser):
    """two_panels.ipynb: a Step of the old panel (the cell run before, up the page) ended by Enter on the new panel's
    Stop. That Stop, disabled as the run ends, dropped the focus to the page, and the old panel's script took it from
    there to the old panel's Step, out of sight; the person is at the new panel, whose Step takes it."""
    from playwright.sync_api import expect

    with voila(HERE / "voila" / "two_panels.ipynb") as url:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(url, timeout=120_000)
        old, new = page.locator(".tests-old"), page.locator(".tests-new")
        expect(old.locator(".rlnb-status")).to_contain_text("step 0 · ready", timeout=120_000)
        old.get_by_role("button", name="Step").focus()
        page.keyboard.press("Enter")
        expect(old.get_by_role("button", name="Stop")).to_be_focused(timeout=30_000)
        expect(new.locator(".rlnb-status")).to_contain_text("waits", timeout=30_000)
        new.get_by_role("button", name="Stop").focus()
        page.keyboard.press("Enter")
        expect(page.locator(".tests-runs-ended")).to_have_text("1", timeout=60_000)
        expect(new.get_by_role("button", name="Step")).to_be_focused(timeout=30_000)
        page.close()
