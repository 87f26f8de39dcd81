"""The panel's RL-metrics tab as a new user meets it: short headers a reader can place (the logged key on hover), a
table that fits the 1244 px a RunPanel gets in Voila at 1280x720 (it was 1810 px, cut at ``completions/distinct_m``
with no scrollbar shown). Read back from ``.value`` after a real Step, and laid out in Debian's Chromium."""

import html
import os
import re

import pytest

import rlnb
from rlnb.tasks import RL_METRICS
from rlnb.testing import FakeBackend
from rlnb.viz.names import SHOWN
from rlnb.widgets import RunPanel
from tests.support.browser import ARGS, CHROMIUM

PANEL_PX = 1244
"""The RL tab's width in Voila at 1280x720 (review40a's measure)."""
VOILA_CELLS = "<style>th, td { font: 13px system-ui, sans-serif !important }</style>"
"""Voila's rendered-HTML rules: a table cell's text is 13 px whatever the table's own ``font-size:small`` says (the
RL table was 1810 px wide there, headers 13 px bold)."""


@pytest.fixture(scope="module")
def rl_table():
    """The RL tab's HTML after one Step of the default panel (rl_step on the first-letter task; the fake backend
    reports no entropy, KL or clip fractions), then every RL metric logged again
    at step 1 at its widest (``-1.235e-05``)."""
    s = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(s, every=0.05)
    try:
        panel.step_button.click()
        assert panel.join(120) and panel.error is None
        s.history.log(1, **dict.fromkeys(RL_METRICS, -1.234567e-05))
        panel.live.tables.selected_index = 2  # the RL metrics tab: drawn when shown
        panel.live.refresh()
        yield panel.live.rl_table.value
    finally:
        panel.close()
        s.close()


def test_the_rl_tab_names_each_metric_briefly_with_its_key_on_hover(rl_table):
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", rl_table)
    logged = [m for m in RL_METRICS if m != "reward" and f"title='{html.escape(SHOWN[m].long)} ({m})'" in rl_table]
    assert headers[0] == "step" and headers[1:] == [SHOWN[m].short for m in logged]
    assert "completions/distinct_mean" in logged and "distinct" in headers  # the metric a collapse shows in
    assert max(map(len, headers)) <= 8  # no raw key: frac_reward_zero_std was 20 characters
    assert len(logged) == len(RL_METRICS) - 1 and re.search(r"<tr><td[^>]*>1</td>", rl_table)  # step 1's row


@pytest.mark.slow  # a browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (.ci/run installs it)")
def test_the_rl_tab_fits_the_panel_width(rl_table):
    from playwright.sync_api import sync_playwright

    page_html = f"{VOILA_CELLS}<div id='tab' style='width:{PANEL_PX}px;overflow-x:auto'>{rl_table}</div>"
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 720})
            page.set_content(page_html)
            wide, shown = page.evaluate("() => { const t = document.getElementById('tab'); "
                                        "return [t.scrollWidth, t.clientWidth]; }")  # fmt: skip
        finally:
            chromium.close()
    assert wide <= shown == PANEL_PX
