"""The browser both browser test modules drive: Debian's Chromium, launched once per module."""

import pytest

from tests.support.browser import ARGS, ARTIFACTS, CHROMIUM


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
