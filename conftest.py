"""Test tiers: ``pytest`` runs the fast tier (under a minute); ``pytest -m 'slow or not slow'`` runs all.

A test is slow when it starts another process or server, loads Hugging Face, Ray, a browser or a real
sink library, runs a notebook or trains for more than about a second. Tests mark themselves with
``@pytest.mark.slow`` (or a module's ``pytestmark``, with the reason); the fixtures that start servers,
clusters or browsers or load Hugging Face mark every test that uses them, and every notebook cell is slow,
here, so that no one has to remember. A test left in the fast tier that imports one of the ``HEAVY``
libraries or starts a process fails and says so: that import or that interpreter alone would cost the tier
seconds.
"""

import sys
from typing import Any

import pytest

SLOW_FIXTURES = frozenset(
    ("server", "auth_server", "hf_server", "voila_url", "browser", "local_ray")  # processes, servers, a browser
    + ("hf_dirs", "transformers", "peft", "trl")  # Hugging Face
)
"""Fixtures that start a server, a cluster or a browser, or load Hugging Face libraries and models."""

HEAVY = ("peft", "transformers", "trl", "ray", "mlflow", "wandb", "trackio", "playwright", "torch._dynamo")
"""Libraries that take a second or more to import (peft: about six): Hugging Face, Ray, sink libraries, a browser,
torch's compiler."""

SPAWNS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"})
"""Audit events of a new process."""

_spawned: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in SPAWNS:
        _spawned.append(f"{event} {args[0]!r}")


sys.addaudithook(_audit)  # hooks cannot be removed: it only appends to a list


@pytest.hookimpl(tryfirst=True)  # before the -m filter deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SLOW_FIXTURES or item.path.suffix == ".ipynb" or "sdk_generated" in item.path.parts:
            item.add_marker(pytest.mark.slow)


def _imported() -> set[str]:
    return {name for name in HEAVY if sys.modules.get(name) is not None}  # None: a test made it unimportable


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    before = _imported()
    _spawned.clear()
    result = yield
    loaded = sorted(_imported() - before)
    if item.get_closest_marker("slow") is None:
        if loaded:
            pytest.fail(f"this fast test imported {', '.join(loaded)} (seconds of CPU): mark it slow", pytrace=False)
        if _spawned:
            pytest.fail(f"this fast test started a process ({_spawned[0]}): mark it slow", pytrace=False)
    return result
