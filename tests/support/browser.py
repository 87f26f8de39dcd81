"""Debian's Chromium and Voila for the browser tests (tests/widgets/test_browser*.py and their conftest)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

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
ARTIFACTS = Path(__file__).parents[1] / "artifacts"
"""Screenshots the browser tests leave (tests/artifacts/)."""
PANEL_MAX = 700
"""Pixels: the tallest the panel may be with its form folded, on a laptop."""


def voila(notebook: Path) -> ServerProcess:
    """Voila serving ``notebook`` on a free loopback port (enter it for the URL)."""
    port = free_port()
    cmd = [sys.executable, "-m", "voila", str(notebook), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1"]
    return ServerProcess(cmd, f"http://127.0.0.1:{port}/", health="voila/static/")


def in_view(page, locator) -> bool:
    """Wholly inside the window and not clipped by a scrolling container (Lab's notebook panel)."""
    box = locator.bounding_box()
    inside = box is not None and box["y"] >= 0 and box["y"] + box["height"] <= page.viewport_size["height"]
    return (
        inside
        and locator.evaluate(
            """el => new Promise(done => {
            const seen = new IntersectionObserver(([entry]) => { seen.disconnect(); done(entry.intersectionRatio); });
            seen.observe(el);
        })"""
        )
        > 0.99
    )


def check_laptop_run(page, panel, shot_name):
    """The panel fits and, during a run, Stop, the status line and the reward plot are on screen together."""
    from playwright.sync_api import expect

    status = panel.locator(".rlnb-status")
    expect(status).to_contain_text("step 0 · ready", timeout=120_000)
    expect(panel.locator(".rlnb-builder")).to_contain_text("muon · lr 0.05, AdamW 0.002 · cosine to 0.1× after step 30")
    expect(panel.locator(".rlnb-schedule")).to_contain_text("step 1 / warmup 3")
    height, window = panel.bounding_box()["height"], "{width}x{height}".format(**page.viewport_size)
    print(f"{shot_name}: the panel is {height:.0f} px tall in a {window} window with its form folded")
    assert height <= PANEL_MAX, f"the panel is {height:.0f} px tall in a {window} window with its form folded"
    panel.evaluate("el => el.scrollIntoView({block: 'start'})")  # as a person scrolls to it
    panel.get_by_role("button", name="Run N").click()
    expect(status).to_contain_text(re.compile(r"step \d+ · ([6-9]|\d\d+)/500 done"), timeout=60_000)  # the table full
    stop, reward = panel.get_by_role("button", name="Stop"), panel.locator(".rlnb-live img").first
    expect(stop).to_be_enabled()
    page.wait_for_timeout(700)  # a redraw of the live view with the latest steps
    page.screenshot(path=str(ARTIFACTS / shot_name))  # the window, as the person sees it
    running = panel.bounding_box()["height"]  # the steps table filled in
    print(f"{shot_name}: {running:.0f} px during the run")
    assert running <= PANEL_MAX, f"the panel is {running:.0f} px tall during the run"
    parts = (("Stop", stop), ("status", status), ("reward plot", reward))
    deadline = time.monotonic() + 30  # the status line is redrawn every step: a check may catch it mid-update
    while True:
        seen = {name: (in_view(page, loc), loc.bounding_box()) for name, loc in parts}
        if all(ok for ok, _ in seen.values()):
            break
        assert time.monotonic() < deadline, f"not all on screen together during the run: {seen}"
        page.wait_for_timeout(200)
    assert "done" in status.inner_text() and reward.evaluate("img => img.complete && img.naturalWidth > 200")
    stop.click()
    expect(status).to_contain_text("stopped early", timeout=60_000)
    return height
