"""The root conftest's guard sees a fast test start a Python process or fork (it then fails the test with "mark it
slow"): a guard test of what the guard records, whatever way it watches for them."""

import os
import subprocess

import pytest


def taken(config: pytest.Config) -> list[str]:
    """What the root conftest recorded the running test starting, emptied: these tests' own starts are their
    point, not a fault (the guard reads the list once the test returns)."""
    root = str(config.rootpath / "conftest.py")
    (guard,) = [p for p in config.pluginmanager.get_plugins() if getattr(p, "__file__", None) == root]
    spawned = guard._spawned
    seen = list(spawned)
    spawned.clear()
    return seen


@pytest.mark.parametrize("argv", [["/nonexistent/bin/python3", "-c", "pass"], "/nonexistent/bin/python3 -c pass"])
def test_a_python_command_is_recorded_even_where_it_cannot_start(pytestconfig, argv):
    with pytest.raises(FileNotFoundError):
        subprocess.Popen(argv)
    assert taken(pytestconfig) == ["/nonexistent/bin/python3 -c pass"]


def test_a_short_program_is_no_python_process(pytestconfig):
    with pytest.raises(FileNotFoundError):
        subprocess.Popen(["/nonexistent/bin/git", "status"])
    assert taken(pytestconfig) == []


def test_a_fork_is_recorded(pytestconfig):
    pid = os.fork()
    if pid == 0:  # the child leaves at once, running nothing of pytest's
        os._exit(0)
    os.waitpid(pid, 0)
    assert taken(pytestconfig) == ["os.fork"]
