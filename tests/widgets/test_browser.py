"""What a person sees: the RunPanel in JupyterLab 4 and in Voila, driven by Playwright in Debian's Chromium.

Each test leaves a screenshot in tests/artifacts/. JupyterLab runs on copies of notebooks/05-widgets.ipynb
and tests/widgets/voila/laptop_panel.ipynb in a temporary folder (its settings and workspaces there too, the
news toast off), so the repository's notebooks are never touched. On a laptop's screen (1366×768) the
panel, its form folded, is at most 700 px tall, and Stop, the status line and the reward plot are on
screen together while a run goes.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from rlnb.testing import ServerProcess, free_port
from tests.support.browser import ARTIFACTS, CHROMIUM, check_laptop_run, voila

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
NOTEBOOK = ROOT / "notebooks" / "05-widgets.ipynb"
LAPTOP_NOTEBOOK = HERE / "voila" / "laptop_panel.ipynb"
WAIT_NOTEBOOK = HERE / "voila" / "wait_panel.ipynb"
TALL = {"width": 1300, "height": 2200}  # the whole panel fits: no scrolling inside Lab's notebook
LAPTOP = {"width": 1366, "height": 768}


pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (.ci/run installs it)"
)


def shot(locator, name):
    locator.screenshot(path=str(ARTIFACTS / name))


# -- JupyterLab 4 ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    shutil.copy(LAPTOP_NOTEBOOK, root / LAPTOP_NOTEBOOK.name)
    shutil.copy(WAIT_NOTEBOOK, root / WAIT_NOTEBOOK.name)
    settings = root / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    port = free_port()
    cmd = [
        *(sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1"),
        *("--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}", "--allow-root"),
        *(f"--LabApp.user_settings_dir={root / '.settings'}", f"--LabApp.workspaces_dir={root / '.workspaces'}"),
        "--ServerApp.log_level=WARN",
    ]
    with ServerProcess(cmd, f"http://127.0.0.1:{port}", health="/api/status", timeout=120) as url:
        yield url


@pytest.fixture(scope="module")
def lab(browser, lab_url):
    """05-widgets.ipynb opened in JupyterLab and run with Run > Run All Cells, as a person would."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport=TALL)
    page.goto(f"{lab_url}/lab/tree/{NOTEBOOK.name}", timeout=120_000)
    expect(page.locator(".jp-StatusBar-Item", has_text="Idle").first).to_be_visible(timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator('li[data-command="runmenu:run-all"]').click()
    expect(page.locator(".jp-OutputArea-output", has_text="6 steps; no error")).to_be_visible(timeout=180_000)
    yield page
    page.close()


def test_lab_run_all_renders_every_widget(lab):
    from playwright.sync_api import expect

    widget_outputs = lab.locator(".jp-OutputArea-output:has(.jupyter-widgets)")
    expect(widget_outputs).to_have_count(2)  # the builder, then the panel
    for text in ("Error displaying widget", "Loading widget", "Traceback", "model not found"):
        expect(lab.locator(".jp-Notebook")).not_to_contain_text(text)
    panel = lab.locator(".rlnb-run-panel")
    expect(panel.locator(".rlnb-status")).to_contain_text("step 6 · 5 done")
    expect(panel.get_by_role("button", name="Step")).to_be_enabled()
    images = panel.locator(".rlnb-live img")
    expect(images).to_have_count(2)  # reward, gradient norm
    assert all(images.nth(i).evaluate("img => img.complete && img.naturalWidth > 300") for i in range(2))
    expect(panel.locator("table.rlnb-steps tr")).to_have_count(7)  # header + 6 steps
    shot(panel, "lab_05_run_all.png")


def test_lab_step_run_n_and_stop(lab):
    from playwright.sync_api import expect

    panel = lab.locator(".rlnb-run-panel")
    status = panel.locator(".rlnb-status")
    panel.get_by_role("button", name="Step").click()
    expect(status).to_contain_text("step 7 · 1 done", timeout=60_000)
    n = panel.locator(".widget-inline-hbox").filter(has=lab.get_by_text("N", exact=True)).locator("input")
    n.fill("500")
    n.press("Enter")
    panel.get_by_role("button", name="Run N").click()
    expect(status).to_contain_text("step 9", timeout=60_000)
    expect(panel.get_by_role("button", name="Step")).to_be_disabled()
    panel.get_by_role("button", name="Stop").click()
    expect(status).to_contain_text("stopped early", timeout=60_000)
    expect(panel.get_by_role("button", name="Step")).to_be_enabled()
    done = int(status.inner_text().split("after ")[1].split(" of ")[0])
    assert 2 <= done < 500
    expect(panel.locator("table.rlnb-steps tr").nth(1)).to_contain_text(str(7 + done))  # newest step on top
    lab.wait_for_timeout(1000)  # the last throttled redraw of the live view
    shot(panel, "lab_05_step_run_stop.png")


def test_lab_wrong_tab_and_a_bad_field_say_why(lab):
    from playwright.sync_api import expect

    panel = lab.locator(".rlnb-run-panel")
    message = panel.locator(".rlnb-builder .rlnb-message")
    unfold(panel)
    panel.get_by_role("tab", name="Adam (locked)").click()
    expect(message).to_contain_text("this session's optimizer is muon")
    expect(panel.get_by_role("button", name="Step")).to_be_disabled()
    shot(panel, "lab_05_wrong_tab.png")
    panel.get_by_role("tab", name="Muon", exact=True).click()
    expect(message).to_contain_text("✓ valid")
    ns = panel.locator(".widget-inline-hbox").filter(has=lab.get_by_text("NS steps", exact=True)).locator("input")
    ns.fill("2.5")
    ns.press("Enter")
    expect(message).to_contain_text("MuonParams.newton_schulz_steps = 2.5 is invalid")
    expect(ns).to_have_value("2.5")  # what was typed, not 25
    expect(panel.locator(".rlnb-invalid input")).to_have_count(1)  # that field, and only it, is red
    shot(panel, "lab_05_bad_field.png")
    ns.fill("5")
    ns.press("Enter")
    expect(message).to_contain_text("✓ valid")


def unfold(panel):
    """Open the panel's optimizer form (folded to its one-line summary)."""
    panel.locator(".rlnb-builder").get_by_text("· preset ").click()


def test_lab_on_a_laptop_the_panel_fits_and_stop_status_and_reward_show_together(browser, lab_url):
    from playwright.sync_api import expect

    page = browser.new_page(viewport=LAPTOP)
    page.goto(f"{lab_url}/lab/workspaces/laptop/tree/{LAPTOP_NOTEBOOK.name}?reset", timeout=120_000)  # alone
    expect(page.locator(".jp-StatusBar-Item", has_text="Idle").first).to_be_visible(timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator('li[data-command="runmenu:run-all"]').click()
    panel = page.locator(".rlnb-run-panel:visible")
    check_laptop_run(page, panel, "lab_laptop_1366x768_running.png")
    unfold(panel)  # everything is one click away
    expect(panel.get_by_role("button", name="Find LR")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "lab_laptop_1366x768_form_open.png"))
    page.close()


def test_lab_find_lr_gives_the_focus_back_after_a_stop_and_never_takes_it_from_another_cell(lab):
    """In JupyterLab, Find LR's focus goes back by a script (``rlnb.widgets.focus_back``): it runs there, and moves the
    focus only from the page or the panel, not from the editor of a cell the person moved on to."""
    from playwright.sync_api import expect

    panel = lab.locator(".rlnb-run-panel")
    find, stop = panel.get_by_role("button", name="Find LR"), panel.get_by_role("button", name="Stop")
    if not find.is_visible():
        unfold(panel)
    said, scripts = panel.locator(".rlnb-lr-find-status"), panel.locator(".rlnb-focus-back .jp-OutputArea-output")
    find.click()
    expect(stop).to_be_focused(timeout=30_000)
    stop.click()
    expect(said).to_contain_text("ended early: stopped after", timeout=120_000)
    expect(find).to_be_focused(timeout=30_000)  # Stop, disabled again, dropped it to the page
    scripts.evaluate_all("outputs => outputs.forEach(output => { output.dataset.seen = 'yes' })")
    find.click()
    expect(stop).to_be_focused(timeout=30_000)
    editor = lab.locator(".jp-CodeCell .cm-content").first  # the person goes on typing in the first cell
    editor.click()
    expect(find).to_be_enabled(timeout=300_000)  # the test ended by itself
    expect(scripts.and_(lab.locator(":not([data-seen])"))).to_have_count(1, timeout=30_000)  # its script, run
    expect(editor).to_be_focused(timeout=1)
    lab.keyboard.press("Escape")  # the cell to command mode, as it was


def test_lab_a_run_waiting_for_a_busy_cells_step_says_so_while_the_cell_runs(browser, lab_url):
    """The run's line said ``running: 0/2 done …`` while the cell after the panel held the session's step: the
    waiting line reaches the page while the kernel is busy in that cell, and the run goes on once it ends."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport=TALL)
    page.goto(f"{lab_url}/lab/workspaces/wait/tree/{WAIT_NOTEBOOK.name}?reset", timeout=120_000)
    expect(page.locator(".jp-StatusBar-Item", has_text="Idle").first).to_be_visible(timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator('li[data-command="runmenu:run-all"]').click()
    status = page.locator(".rlnb-run-panel .rlnb-status")
    waiting = "waiting for the session: another cell's step holds it (the run goes on when that cell ends"
    expect(status).to_contain_text(waiting, timeout=60_000)  # the cell sleeps 20 s in its block
    shot(page.locator(".rlnb-run-panel"), "lab_wait_for_a_cell.png")
    expect(status).to_contain_text("step 2 · 2 done", timeout=180_000)
    expect(page.locator(".jp-OutputArea-output", has_text="joined True None")).to_be_visible(timeout=60_000)
    page.close()


# -- Voila -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def voila_url():
    with voila(HERE / "voila" / "run_panel.ipynb") as url:
        yield url


def test_voila_on_a_laptop_the_panel_fits_and_stop_status_and_reward_show_together(browser):
    with voila(LAPTOP_NOTEBOOK) as url:
        page = browser.new_page(viewport=LAPTOP)
        page.goto(url, timeout=120_000)
        check_laptop_run(page, page.locator(".rlnb-run-panel"), "voila_laptop_1366x768_running.png")
        page.close()


def test_voila_a_person_steps_runs_and_stops_a_session(browser, voila_url):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1200, "height": 1600})
    page.goto(voila_url, timeout=120_000)
    panel = page.locator(".rlnb-run-panel")
    status = panel.locator(".rlnb-status")
    expect(status).to_contain_text("step 0 · ready", timeout=120_000)
    box, step_box = panel.bounding_box(), panel.get_by_role("button", name="Step").bounding_box()
    assert step_box["y"] - box["y"] < 40  # the buttons are at the top
    assert box["height"] < 1000, box  # compact: about 1350 px before
    unfold(panel)

    # Set the learning rate in the exact-entry box beside the slider; the JSON body is one click away.
    lr_box = panel.locator(".widget-hbox:has(> .widget-hslider)").first.locator("input")  # Adam's
    lr_box.fill("0.003")
    lr_box.press("Enter")
    panel.get_by_text("request body (JSON)").click()
    expect(panel.locator("pre")).to_contain_text('"learning_rate": 0.003', timeout=30_000)
    expect(panel.locator(".rlnb-builder")).to_contain_text("(modified)")
    panel.get_by_text("request body (JSON)").click()  # collapsed again

    panel.get_by_role("button", name="Step").click()
    expect(status).to_contain_text("step 1", timeout=60_000)
    panel.get_by_role("tab", name="operations").click()
    table = panel.locator("table.rlnb-ops")
    expect(table.locator("tr", has_text="optim-step").first).to_contain_text("completed", timeout=30_000)
    panel.get_by_role("tab", name="steps").click()

    panel.get_by_role("button", name="Run N").click()
    expect(status).to_contain_text("step 3", timeout=60_000)
    panel.get_by_role("button", name="Stop").click()
    expect(status).to_contain_text("stopped early", timeout=60_000)
    done = int(status.inner_text().split("after ")[1].split(" of ")[0])
    assert 1 <= done < 500
    page.wait_for_timeout(1500)  # let the last throttled redraw of the live view arrive
    page.screenshot(path=str(ARTIFACTS / "voila_run_panel.png"), full_page=True)

    panel.get_by_role("tab", name="Muon (locked)").click()
    expect(panel.locator(".rlnb-message")).to_contain_text("this session's optimizer is adam")
    expect(panel.get_by_role("button", name="Run N")).to_be_disabled()
    shot(panel, "voila_wrong_tab.png")
    page.close()
