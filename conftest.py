"""Test tiers: ``pytest`` runs the fast tier (under a minute); ``pytest -m 'slow or not slow'`` runs all.

A test is slow when it starts another process or server, loads Hugging Face, Ray or a browser, or runs a
notebook. Tests mark themselves with ``@pytest.mark.slow`` (or a module's ``pytestmark``); the fixtures
that start servers mark every test that uses them, and every notebook cell is slow, here, so that no
one has to remember.
"""

import pytest

SLOW_FIXTURES = frozenset({"server", "auth_server", "hf_dirs", "hf_server", "local_ray", "browser", "voila_url"})
"""Fixtures that start a server, a cluster or a browser, or build Hugging Face models."""


@pytest.hookimpl(tryfirst=True)  # before the -m filter deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SLOW_FIXTURES or item.path.suffix == ".ipynb" or "sdk_generated" in item.path.parts:
            item.add_marker(pytest.mark.slow)
