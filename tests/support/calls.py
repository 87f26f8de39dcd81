"""Counting the Python calls a piece of work makes: the tests that check a batch costs no Python call per item
compare the counts at two sizes (counts are the same under any load, where times are not)."""

import gc
import sys


def python_calls(fn, settle=None, tries=3):
    """The fewest Python function calls (generator steps included) ``fn()`` made on this thread in ``tries`` runs,
    ``settle()`` run uncounted after each. Calls that are no work of ``fn``'s vary from run to run: a finalizer of an
    earlier test's garbage run by a collection, a report another thread delivered on this one while it submitted.
    Collection is held off during each run, so no finalizer runs in it; the young generations are collected before
    (a full pass walked everything the earlier tests of the process left alive: 0.3 s a count late in a run). The
    fewest is ``fn``'s own count."""
    counts = []
    gc.collect(1)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(tries):
            calls = 0

            def count(frame, event, arg):
                nonlocal calls
                calls += event == "call"

            sys.setprofile(count)
            try:
                fn()
            finally:
                sys.setprofile(None)
            counts.append(calls)
            if settle is not None:
                settle()
    finally:
        if collecting:
            gc.enable()
    return min(counts)
