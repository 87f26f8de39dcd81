"""The live view's steps table in a narrow column, measured in Debian's Chromium: below ~360 px of panel its seven
columns were 335 px wide in the tab's 320 px box (past the panel's edge), and each ``12.35 s`` broke over two lines."""

import os

import pytest

from rlnb.viz.live import LiveView
from rlnb.viz.livetables import NARROW_PX
from tests.support.histories import hand_history

CHROMIUM = "/usr/bin/chromium"  # as tests/widgets/test_browser.py
pytestmark = [
    pytest.mark.slow,  # a browser
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (.ci/run installs it)"),
]
FONT = "font-family: system-ui, -apple-system, blinkmacsystemfont, 'Segoe UI', helvetica, arial, sans-serif"
"""JupyterLab's ``--jp-ui-font-family``, which a widget's HTML is drawn in."""
MEASURE = """() => {
    const table = document.querySelector('table.rlnb-steps');
    const cells = [...table.querySelectorAll('td')];
    const size = parseFloat(getComputedStyle(table).fontSize);
    const tall = cells.filter(td => td.getBoundingClientRect().height > 1.25 * size + 2 + 1).map(td => td.innerText);
    return [table.getBoundingClientRect().width, size, tall];
}"""
"""The table's width, its font size and the text of each cell taller than one line (and its padding)."""


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium.new_page()
        finally:
            chromium.close()


def steps_table(metrics):
    """A live view's steps table after six steps (each 1 s), with ``metrics`` logged at each."""
    history = hand_history([2.34567 + i for i in range(6)], norms=[12.3456 + i for i in range(6)])
    for step in range(1, 7):
        history.log(step, **{m: 0.123456 for m in metrics})
    view = LiveView(history, metrics=metrics, every=0)
    try:
        return view.steps_table.value
    finally:
        view.close()


@pytest.mark.parametrize("metrics, box", [((), 320), ((), 264), (("reward",), 320), (("reward", "held out"), 340)])
def test_a_steps_table_fits_a_narrow_box_each_figure_on_one_line(page, metrics, box):
    html = steps_table(metrics).replace(">1.00 s<", ">12.35 s<")  # a step's time, as long as they come
    page.set_content(f"<div style='width:{box}px;{FONT}'>{html}</div>")
    width, size, tall = page.evaluate(MEASURE)
    assert width <= box and not tall, (width, tall)
    page.set_content(f"<div style='width:900px;{FONT}'>{html}</div>")
    assert page.evaluate(MEASURE)[1:] == [13, []]  # wide, its text as large as ever


SIZES = "() => [...document.querySelectorAll('table.rlnb-steps')].map(t => parseFloat(getComputedStyle(t).fontSize))"


def test_a_steps_tables_narrow_rule_reaches_no_other_table_of_the_page(page):
    """Its ``<style>`` was the page's, for every ``table.rlnb-steps``: beside a notebook's saved output of another
    version (its text smaller below 200 px, say), the newer rule (360 px) shrank the older table in a 300 px box too.
    Each table's rule is for its own class: each follows its own."""
    newer = steps_table(())
    older = steps_table(()).replace(f"max-width: {NARROW_PX}px", "max-width: 200px")
    assert older != newer  # else this test proves nothing
    page.set_content(f"<div style='width:900px;{FONT}'>{newer}</div><div style='width:300px;{FONT}'>{older}</div>")
    assert page.evaluate(SIZES) == [13, 13]  # the newer wide, the older over its own 200 px
    page.set_content(
        f"<div style='width:300px;{FONT}'>{newer}</div><div style='width:300px;{FONT}'>{steps_table(())}</div>"
    )
    assert page.evaluate(SIZES) == [10, 10]  # two views of this version, each narrow: each its own rule
