"""Test tiers: ``pytest`` runs the fast tier (under a minute); ``pytest -m 'slow or not slow'`` runs all.

A test is slow when it starts another process or server, loads Hugging Face, Ray, a browser or a real
sink library, runs a notebook or trains for more than about a second. Tests mark themselves with
``@pytest.mark.slow`` (or a module's ``pytestmark``, with the reason); the fixtures that start servers,
clusters or browsers or load Hugging Face mark every test that uses them, and every notebook cell is slow,
here, so that no one has to remember. A test left in the fast tier that imports one of the ``HEAVY``
libraries or starts a Python process fails and says so: that import or that interpreter alone would cost the
tier seconds.
"""

import gc
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cpu_heavy import HEAVY as CPU_HEAVY

# One OpenMP thread for the torch work tests do on their own thread (references, models built by hand) and in
# the processes they start, unless the caller says otherwise: on a shared machine a second thread that waits
# for a busy core spins, and it doubled the fast tier's CPU time. Engine workers still follow the engine's
# thread policy (rlnb.engine.threads), which sets their count itself. Set before torch is first imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The test processes keep the bytecode they compile (pytest's assertion-rewritten test modules, rlnb's own modules)
# in the __pycache__ folders that .gitignore leaves out, even where PYTHONDONTWRITEBYTECODE is set: without them each
# worker of each run rewrote and compiled every test module again: half of its collection CPU (7.2 s, 3.6 s with them).
sys.dont_write_bytecode = False


def _one_core_per_worker() -> None:
    """Each pytest-xdist worker runs on one core, the workers taking the cores in turn (``-n 4`` on two cores: two
    a core): the engine's thread policy (``rlnb.engine.threads``) then sees one core and runs its workers on one
    thread. Seeing them all, it timed two threads per engine worker while another test process held the second
    core: the waiting thread spun, and an engine-heavy test used twice the CPU (a same-minute A/B: 22 s of CPU
    against 11.5 s)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker.startswith("gw") and count.isdigit() and int(count) > 1 and len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})


_one_core_per_worker()

SLOW_FIXTURES = frozenset(
    ("server", "auth_server", "hf_server", "voila_url", "browser", "local_ray")  # processes, servers, a browser
    + ("hf_dirs", "transformers", "peft", "trl")  # Hugging Face
)
"""Fixtures that start a server, a cluster or a browser, or load Hugging Face libraries and models."""

HEAVY = ("peft", "transformers", "trl", "ray", "mlflow", "wandb", "trackio", "playwright")
"""Libraries that take a second or more to import (peft: about six): Hugging Face, Ray, sink libraries, a browser.
(torch's compiler is not one: torch.optim imports it on the first optimizer every session makes.)"""

_spawned: list[str] = []
"""The Python processes (an interpreter that imports rlnb and torch costs seconds) and forks the running test
started; a short program such as ``git`` is no cost."""


def _note_command(argv: Any, executable: Any) -> None:
    program = executable or (argv.split()[0] if isinstance(argv, str | bytes) else next(iter(argv), ""))
    if "python" in os.path.basename(os.fsdecode(program)):
        _spawned.append(" ".join(map(os.fsdecode, [argv] if isinstance(argv, str | bytes) else argv))[:200])


_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]


def _watched_execute_child(self: subprocess.Popen, args: Any, executable: Any, *rest: Any) -> Any:
    """Every command goes through ``Popen._execute_child`` (``subprocess.run``, asyncio's subprocesses). Watched
    there rather than by an audit hook, which Python calls on every audited event (``id()``, ``sys._getframe``,
    each ``open``: millions in a run, 0.3 µs each) to pick out the few ``subprocess.Popen`` ones."""
    _note_command(args, executable)
    return _execute_child(self, args, executable, *rest)


subprocess.Popen._execute_child = _watched_execute_child  # type: ignore[attr-defined]
os.register_at_fork(before=lambda: _spawned.append("os.fork"))  # os.fork and os.forkpty; it only appends to a list


WHOLLY_SLOW = re.compile(r"^pytestmark = (\[)?pytest\.mark\.slow\b", re.M)
"""A module whose every test is slow says so on one line: ``pytestmark = pytest.mark.slow  # why``."""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast tier (``-m 'not slow'``, the default) does not import what it would deselect whole: the SDK's
    generated tests and the modules that are slow as a whole (their imports, the SDK, Hugging Face,
    schemathesis, cost seconds). Any other mark expression collects them."""
    if config.getoption("markexpr") != "not slow":
        return None
    if collection_path.name == "sdk_generated":
        return True
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return bool(WHOLLY_SLOW.search(collection_path.read_text(encoding="utf-8"))) or None
    return None


@pytest.hookimpl(tryfirst=True)  # before the -m filter deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if (
            fixtures & SLOW_FIXTURES
            or item.path.suffix == ".ipynb"
            or "sdk_generated" in item.path.parts
            or item.nodeid in CPU_HEAVY  # over the fast tier's CPU bound, its idea kept fast by another test
        ):
            item.add_marker(pytest.mark.slow)


NBVAL = "-p nbval --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg"
"""What runs the notebooks (the README's test command gives it): ``addopts`` leaves nbval out, whose imports
(nbformat, jsonschema's format grammars) cost every fast-tier process 1.2 s of CPU for notebooks it deselects."""


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """A tier that runs notebooks, met without nbval, would skip every one of them in silence: it stops instead."""
    config = parent.config
    runs_notebooks = file_path.suffix == ".ipynb" and config.getoption("markexpr") != "not slow"
    if runs_notebooks and not config.pluginmanager.has_plugin("nbval"):
        raise pytest.UsageError(f"{file_path.name}: notebooks run under nbval; add {NBVAL} (the README's command)")


gc.disable()  # until the tests start: the test modules' imports make next to no garbage, and the passes over all
# they imported so far (a full one every hundred young ones) were a third of collection's CPU (10.3 s of 10.3 → 6.9)

GC_THRESHOLDS = (20_000, 20, 100)
"""The garbage collector's thresholds while tests run (Python's are 700, 10, 10): the widget, plot and session
objects that tests leave behind (an ipywidgets widget lives until it is closed) made each full pass over them
cost about 0.15 s, and the default thresholds ran one every few seconds; these run a third as many passes of each
generation, and garbage is still collected."""


@pytest.hookimpl(tryfirst=True)  # before the loop itself, in pytest-xdist's controller too (it collects nothing)
def pytest_runtestloop(session: pytest.Session) -> None:
    """What collection imported (torch, pandas, matplotlib: about a million objects) lives until the end:
    the garbage collector's full passes need not walk it again during every test."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()


@pytest.hookimpl(trylast=True)  # after the unraisable-exception plugin's last collection
def pytest_unconfigure(config: pytest.Config) -> None:
    """Nor at exit, where the interpreter's own passes over everything the tests made cost seconds."""
    gc.freeze()


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
            pytest.fail(f"this fast test started a Python process ({_spawned[0]}): mark it slow", pytrace=False)
    return result


def _open_now() -> tuple[set[Any], set[str], set[Any]]:
    """The sessions, widgets and engine workers open now (none where their modules are not imported yet)."""
    sessions = sys.modules.get("rlnb.session.open_sessions")
    widgets = sys.modules.get("ipywidgets.widgets.widget")
    workers = sys.modules.get("rlnb.engine.worker")
    return (
        set(sessions.OPEN) if sessions else set(),
        set(widgets._instances) if widgets else set(),
        set(workers._LIVE) if workers else set(),
    )


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_call")
def pytest_runtest_call_closes_what_it_left_open(item: pytest.Item):
    """After the test (its fixtures are still up), close the widgets, sessions and engine workers it opened and left
    open: an ipywidgets widget lives until it is closed, a worker's thread until it is (a backend whose session failed
    to start keeps its own), and each garbage collection pass over what they hold (histories, plots, models) cost
    every later test in the process."""
    sessions_before, widgets_before, workers_before = _open_now()
    failed = False
    try:
        return (yield)
    except BaseException:
        failed = True
        raise
    finally:
        sessions, widgets, workers = _open_now()
        instances = sys.modules["ipywidgets.widgets.widget"]._instances if widgets else {}
        for model_id in widgets - widgets_before:
            if (widget := instances.get(model_id)) is not None:  # closing a box may close its children first
                widget.close()
        for session in sessions - sessions_before:
            if not session.closed:
                try:
                    session.close()
                except Exception:
                    if not failed:  # a close failing after the test's own failure (its server gone) must not hide it
                        raise
        for worker in workers - workers_before:
            if not worker.closed and not worker.close(60):
                pytest.fail("an engine worker this test left open was still running 60 s after its close", False)
