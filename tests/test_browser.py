"""What a person sees: a RunPanel served by Voila, driven by Playwright in Debian's Chromium."""

import os
import sys
from pathlib import Path

import pytest

from rlnb.testing import ServerProcess, free_port

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HERE = Path(__file__).parent
ARTIFACTS = HERE / "artifacts"

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (.ci/run installs it)"
)


@pytest.fixture(scope="module")
def voila_url():
    port = free_port()
    notebook = str(HERE / "voila" / "run_panel.ipynb")
    cmd = [sys.executable, "-m", "voila", notebook, "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1"]
    with ServerProcess(cmd, f"http://127.0.0.1:{port}/", health="voila/static/") as url:
        yield url


def test_a_person_steps_runs_and_stops_a_session(voila_url):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1600})
            page.goto(voila_url, timeout=120_000)
            status = page.locator(".rlnb-status")
            expect(status).to_contain_text("step 0 · ready", timeout=120_000)

            # Set the learning rate in the exact-entry box beside the slider.
            lr_row = page.locator(".widget-hbox").filter(has=page.get_by_text("learning rate", exact=True)).first
            lr_box = lr_row.locator("input[type=number]")
            lr_box.fill("0.003")
            lr_box.press("Enter")
            expect(page.locator("pre")).to_contain_text('"learning_rate": 0.003', timeout=30_000)

            page.get_by_role("button", name="Step").click()
            expect(status).to_contain_text("step 1", timeout=60_000)
            table = page.locator("table").filter(has_text="optim-step").last
            expect(table.locator("tr", has_text="optim-step").first).to_contain_text("completed", timeout=30_000)

            page.get_by_role("button", name="Run N").click()
            expect(status).to_contain_text("step 3", timeout=60_000)
            page.get_by_role("button", name="Stop").click()
            expect(status).to_contain_text("stopped early", timeout=60_000)
            text = status.inner_text()
            done = int(text.split("after ")[1].split(" of ")[0])
            assert 1 <= done < 500
            page.wait_for_timeout(1500)  # let the last throttled redraw of the live view arrive
            page.screenshot(path=str(ARTIFACTS / "run_panel.png"), full_page=True)
        finally:
            browser.close()
