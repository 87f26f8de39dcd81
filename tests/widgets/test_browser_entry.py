"""What a person types in a RunPanel's boxes of step counts (N, the builder's warmup and total steps), in Debian's
Chromium through Voila: the count the kernel uses is the one the box shows, or it is refused, naming the field."""

import os
import re
from pathlib import Path

import pytest

from tests.support.browser import CHROMIUM, voila

HERE = Path(__file__).parent

pytestmark = [
    pytest.mark.slow,  # a browser, a Voila server and its kernel
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (.ci/run installs it)"),
]


def test_a_count_typed_as_1e5_or_2_5_is_that_count_or_refused_never_cut_to_its_leading_digits(browser):
    """The boxes were ``IntText``, which the browser reads with ``parseInt``: "1e5" typed as total steps was 1 step
    and "2.5" warmup steps 2 (the message spoke of a warmup of 2 that nobody typed), while each box still showed what
    was typed; "2.5" as N ran 2 steps."""
    from playwright.sync_api import expect

    with voila(HERE / "voila" / "run_panel.ipynb") as url:
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.goto(url, timeout=120_000)
        panel = page.locator(".rlnb-run-panel")
        status = panel.locator(".rlnb-status")
        expect(status).to_contain_text("step 0 · ready", timeout=120_000)
        panel.locator("button[title='open or fold the optimizer form']").click()
        form = panel.locator(".rlnb-builder")
        form.locator("select").nth(1).select_option("linear")  # the schedule (the preset's is the first)
        total = form.get_by_label("total steps")
        total.fill("1e5")
        total.press("Tab")
        expect(form).to_contain_text("linear to 0.1× after step 100000", timeout=30_000)
        warmup = form.get_by_label("warmup steps")
        warmup.fill("2.5")
        warmup.press("Tab")
        message = form.locator(".rlnb-message")
        expect(message).to_contain_text("Schedule.warmup_steps = 2.5 is invalid: must be an integer", timeout=30_000)
        warmup.fill("2")
        warmup.press("Tab")
        expect(message).to_contain_text("✓ valid", timeout=30_000)
        n = panel.get_by_label("N", exact=True)
        n.fill("2.5")
        n.press("Tab")
        expect(status).to_contain_text("N must be an integer in [1, 1000003]", timeout=30_000)
        expect(status).to_contain_text("got 2.5")
        expect(panel.get_by_role("button", name="Run N")).to_be_disabled()
        n.fill("1e1")
        n.press("Tab")
        expect(status).to_contain_text("step 0 · ready", timeout=30_000)
        panel.get_by_role("button", name="Run N").click()
        expect(status).to_contain_text("0/10 done", timeout=30_000)  # ten steps: 1e1, not 1
        panel.get_by_role("button", name="Stop").click()
        expect(status).to_contain_text("stopped early after", timeout=120_000)
        page.close()


def test_a_keyboard_alone_stops_find_lr_on_a_builder_alone(browser):
    """Enter on Find LR of a builder shown alone: the button disabled itself and dropped the focus to the page, and its
    Stop (the only one: no panel) was Tabs away; the focus goes to it, and back to Find LR after Enter on it."""
    from playwright.sync_api import expect

    with voila(HERE / "voila" / "builder_alone.ipynb") as url:
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.goto(url, timeout=120_000)
        form = page.locator(".rlnb-builder")
        find, stop = form.get_by_role("button", name="Find LR"), form.get_by_role("button", name="Stop")
        expect(find).to_be_enabled(timeout=120_000)
        expect(stop).to_be_hidden()
        find.focus()
        page.keyboard.press("Enter")
        expect(stop).to_be_focused(timeout=60_000)
        expect(form.locator(".rlnb-lr-find-status")).to_contain_text(re.compile(r"running … \d+/2000"), timeout=120_000)
        page.keyboard.press("Enter")
        expect(form.locator(".rlnb-lr-find-status")).to_contain_text("ended early: stopped after", timeout=120_000)
        expect(stop).to_be_hidden()
        expect(find).to_be_focused(timeout=30_000)
        page.close()


def test_a_number_typed_that_a_float_box_cannot_hold_is_refused_naming_the_field_not_put_back_unsaid(browser):
    """The boxes were ``FloatText``: the browser put back the old value, without a word, for "1e400" (past a float)
    or an empty box, and the form said "✓ valid" for a rate nobody had typed (review42c L2). What is typed is kept and
    read by the kernel: the message names the field and what it must be."""
    from playwright.sync_api import expect

    with voila(HERE / "voila" / "builder_alone.ipynb") as url:
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.goto(url, timeout=120_000)
        form = page.locator(".rlnb-builder")
        message = form.locator(".rlnb-message")
        expect(message).to_contain_text("✓ valid", timeout=120_000)
        rate = next(box for box in form.locator("input:visible").all() if box.input_value() == "0.002")
        for typed, said in (("1e400", "AdamParams.learning_rate = '1e400' is invalid"), ("", "learning_rate = '' is")):
            rate.fill(typed)
            rate.press("Enter")
            expect(message).to_contain_text(said, timeout=30_000)
            expect(message).to_contain_text("must be a finite number, > 0")
            assert rate.input_value() == typed  # what was typed stays in the box, marked red
            expect(form.locator(".rlnb-invalid input:visible")).to_have_count(1)
        total = form.get_by_label("total steps")
        total.fill("1e400")
        total.press("Tab")
        expect(message).to_contain_text("Schedule.total_steps = '1e400' is invalid", timeout=30_000)
        rate.fill("1e-3")
        rate.press("Enter")
        total.fill("100")
        total.press("Tab")
        expect(message).to_have_text("✓ valid", timeout=30_000)
        assert rate.input_value() == "1e-3"  # as typed, not rewritten
        page.close()


def test_an_on_change_callback_that_raises_after_an_edit_in_the_page_is_said_on_the_form(browser):
    """After an edit made in the page, a callback's warning reached only JupyterLab's log console, under a form that
    said "✓ valid" (review42c M1): its message line names the callback and its error."""
    from playwright.sync_api import expect

    with voila(HERE / "voila" / "builder_callback.ipynb") as url:
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.goto(url, timeout=120_000)
        form = page.locator(".rlnb-builder")
        message = form.locator(".rlnb-message")
        expect(message).to_contain_text("✓ valid", timeout=120_000)
        beta1 = form.get_by_label("beta1").first
        beta1.fill("0.8")
        beta1.press("Enter")
        said = "⚠ the on_change callback follow raised ZeroDivisionError: my callback broke"
        expect(message).to_contain_text(said, timeout=30_000)
        page.close()
