"""A RunPanel in a narrow column, in Debian's Chromium through Voila: JupyterLab at 125% zoom on a 1366×768 laptop,
its file browser open, gives a cell's output 661 px. The panel fits the laptop's height there, every field shows
whole (down to a 400 px column), a long error wraps inside the panel, and a keyboard alone opens the folded optimizer
form, runs, stops a run and stops Find LR, its focus back on the button that started a run once the run has ended.
Screenshots go to tests/artifacts/.
"""

import os
from pathlib import Path

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, check_laptop_run, voila

HERE = Path(__file__).parent

pytestmark = [
    pytest.mark.slow,  # a browser, a Voila server and its kernel
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (.ci/run installs it)"),
]
NARROW = {"width": 661 + 30, "height": 768}
"""Voila's page has a 15 px margin each side: the panel is 661 px wide, as in that JupyterLab column."""
CUT = """panel => {
    const cut = [];
    for (const el of panel.querySelectorAll('*')) {
        if (el.closest('.rlnb-live') || el.closest('.noUi-target') || !el.clientWidth) continue;  // not the form's
        if (el.scrollWidth > el.clientWidth + 1) {
            const what = `${el.tagName}.${el.className} ${el.clientWidth} px shows ${el.scrollWidth}`;
            cut.push(`${what}: ${el.innerText.slice(0, 60)}`);
        }
    }
    return cut;
}"""
"""Every box in the panel whose content is wider than the box (the rest is cut off or must be scrolled to),
apart from the live view (``rlnb.viz``'s) and the slider's inner track."""
PAST_EDGE = """panel => {
    const edge = panel.getBoundingClientRect().right, past = [];
    for (const el of panel.querySelectorAll('*')) {
        const box = el.getBoundingClientRect();
        if (box.width && box.right > edge + 0.5) past.push(`${el.tagName}.${el.className} ${box.right - edge} px`);
    }
    return past;
}"""
"""Every box of the panel, the live view's included, that reaches past its right edge."""


@pytest.fixture(scope="module")
def narrow(browser):
    """narrow_panel.ipynb in Voila: a Muon panel whose step function fails with a 260-character path at its first
    step, then takes half a second a step."""
    with voila(HERE / "voila" / "narrow_panel.ipynb") as url:
        yield url


def open_panel(browser, url):
    from playwright.sync_api import expect

    page = browser.new_page(viewport=NARROW)
    page.goto(url, timeout=120_000)
    panel = page.locator(".rlnb-run-panel")
    expect(panel.locator(".rlnb-status")).to_contain_text("step 0 · ready", timeout=120_000)
    return page, panel


def test_in_a_narrow_column_every_field_shows_whole_and_a_long_error_wraps(browser, narrow):
    from playwright.sync_api import expect

    page, panel = open_panel(browser, narrow)
    assert panel.bounding_box()["width"] == pytest.approx(661, abs=2)
    panel.get_by_role("button", name="Step").click()
    status = panel.locator(".rlnb-status")
    expect(status).to_contain_text("stopped: FileNotFoundError", timeout=60_000)
    expect(status).to_contain_text("/train.jsonl")
    panel.locator(".rlnb-builder").get_by_text("· preset ").click()  # the form open: both groups of Muon's fields
    expect(panel.get_by_role("button", name="Find LR")).to_be_visible()
    page.wait_for_timeout(500)  # the form laid out
    panel.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(ARTIFACTS / "voila_narrow_661px_form_open.png"))
    shows_whole(panel, status)
    page.set_viewport_size({"width": 450 + 30, "height": 768})  # Find LR's row squeezed its buttons: "Find L…"
    page.wait_for_timeout(500)
    assert panel.bounding_box()["width"] == pytest.approx(450, abs=2)
    shows_whole(panel, status)
    # a split screen's column: the button row squeezed Run N ("R…"), the fields' 300 px columns cut their boxes
    page.set_viewport_size({"width": 400 + 30, "height": 768})
    page.wait_for_timeout(500)
    assert panel.bounding_box()["width"] == pytest.approx(400, abs=2)
    page.screenshot(path=str(ARTIFACTS / "voila_narrow_400px_form_open.png"))
    shows_whole(panel, status)
    assert panel.evaluate(PAST_EDGE) == []
    page.close()


def shows_whole(panel, status):
    """No box in the panel cuts what it holds, every field of the open form is inside the panel, and the status
    line's text wraps onto lines within it."""
    # the two fixed 300 px columns of fields cut the right one's boxes (598 px left for 608), and the error's path
    # ran out of the panel, its end cut off
    assert panel.evaluate(CUT) == []
    edge = panel.bounding_box()
    fields = panel.locator(".rlnb-builder input:visible, .rlnb-builder select:visible").all()
    assert len(fields) >= 15  # preset, 2 × (rate, its box), 8 fields, 4 of the schedule, units
    for field in fields:
        box = field.bounding_box()
        assert box["x"] >= edge["x"] and box["x"] + box["width"] <= edge["x"] + edge["width"], field.evaluate(
            "el => el.closest('.widget-inline-hbox')?.innerText"
        )
    last = status.evaluate(
        "el => { const r = document.createRange(); r.selectNodeContents(el); const b = r.getBoundingClientRect();"
        " return [b.right, b.height]; }"
    )
    assert last[0] <= edge["x"] + edge["width"] and last[1] > 40  # wrapped onto lines within the panel


def test_a_keyboard_alone_opens_the_folded_form_runs_and_stops(browser, narrow):
    from playwright.sync_api import expect

    page, panel = open_panel(browser, narrow)
    form = panel.get_by_role("button", name="Find LR")
    expect(form).to_be_hidden()  # folded
    panel.get_by_role("button", name="Step").focus()
    for _ in range(6):  # Step, Run N, N, (Stop is off), then the form's opener: the accordion's title takes no focus
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.title") == "open or fold the optimizer form":
            break
    else:
        raise AssertionError("Tab never reached a control that opens the optimizer form")
    page.keyboard.press("Enter")
    expect(form).to_be_visible(timeout=30_000)
    page.keyboard.press("Tab")  # on into the form: the preset
    expect(panel.locator(".rlnb-builder select").first).to_be_focused()
    body = panel.locator("button[title='show or hide the request body (JSON)']")  # its title takes no focus either
    body.focus()
    page.keyboard.press("Enter")
    expect(panel.locator(".rlnb-builder pre")).to_contain_text('"learning_rate": 0.05', timeout=30_000)
    panel.locator("button[title='open or fold the optimizer form']").focus()
    page.keyboard.press("Enter")  # folded again
    expect(form).to_be_hidden(timeout=30_000)
    status, step = panel.locator(".rlnb-status"), panel.get_by_role("button", name="Step")
    step.focus()
    page.keyboard.press("Enter")  # a button takes Enter
    expect(status).to_contain_text("stopped: FileNotFoundError", timeout=60_000)
    # the run ended by itself: Stop, disabled, dropped the focus to the page; it is back on Step
    expect(step).to_be_focused(timeout=30_000)
    page.keyboard.press("Tab")
    run = panel.get_by_role("button", name="Run N")
    expect(run).to_be_focused()
    expect(run).to_be_enabled(timeout=30_000)  # enabled before the status says the failure (test_run_ends.py)
    page.keyboard.press("Enter")  # 20 steps of half a second
    stop = panel.get_by_role("button", name="Stop")
    # Run disables itself: the focus went to the page, Stop a few Tabs away; it goes on to Stop
    expect(stop).to_be_focused(timeout=30_000)
    expect(status).to_contain_text("/20 done", timeout=30_000)
    page.keyboard.press("Enter")
    expect(status).to_contain_text("stopped early", timeout=60_000)
    expect(run).to_be_focused(timeout=30_000)  # back where the run started: Enter runs again
    page.close()


@pytest.fixture(scope="module")
def laptop(browser):
    """laptop_panel.ipynb in Voila: a Muon panel on the first-letter task, Find LR on a copy of its session."""
    with voila(HERE / "voila" / "laptop_panel.ipynb") as url:
        yield url


def test_in_a_narrow_column_the_panel_fits_a_laptops_height_and_its_plots_share_a_row(browser, laptop):
    """At 661 px the reward and gradient-norm plots (320 + 432 px) stacked: the panel was 725 px tall, 848 px during a
    run. They share a row, scaled alike, and the panel fits as it does on the laptop's whole width."""
    page, panel = open_panel(browser, laptop)
    plots = [img.bounding_box() for img in panel.locator(".rlnb-live img").all()]
    assert len(plots) == 2 and plots[0]["y"] == pytest.approx(plots[1]["y"], abs=1)  # side by side
    assert plots[0]["height"] == pytest.approx(plots[1]["height"], abs=1)
    assert plots[1]["x"] + plots[1]["width"] <= panel.bounding_box()["x"] + 661
    assert plots[0]["width"] >= 0.85 * 320 - 1  # readable: scaled no further
    check_laptop_run(page, panel, "voila_narrow_661px_running.png")
    page.close()


def test_a_keyboard_alone_stops_find_lr(browser, laptop):
    from playwright.sync_api import expect

    page, panel = open_panel(browser, laptop)
    panel.locator("button[title='open or fold the optimizer form']").press("Enter")
    find = panel.get_by_role("button", name="Find LR")
    find.focus()
    page.keyboard.press("Enter")
    stop = panel.get_by_role("button", name="Stop")
    # Find LR disables itself: the focus went to the page; it goes on to the panel's Stop, which ends the test
    expect(stop).to_be_focused(timeout=30_000)
    page.keyboard.press("Enter")
    said = panel.locator(".rlnb-lr-find-status")
    expect(said).to_contain_text("ended early: stopped after", timeout=120_000)
    expect(find).to_be_enabled()
    expect(find).to_be_focused(timeout=30_000)  # Stop, disabled again, dropped the focus to the page
    page.close()
