"""The fast tests moved to the slow tier for their CPU alone (docs/testing.md, "Two tiers"), read from
``cpu_heavy.txt``: the root ``conftest.py`` marks them slow, ``tests/test_cpu_heavy.py`` checks each entry, and
``python -m tests.support.tier_head`` prints the tier's CPU head, the tests that the rule would move next."""

from pathlib import Path

BOUND_S = 0.3
"""A fast test over this much CPU (setup, call and teardown, in one process) in each of two runs is moved, once
a fast test keeps its idea."""


def _read(path: Path) -> dict[str, str]:
    """Each moved test's node id, and the fast test (a node id, or a test function with a fast case) kept beside it."""
    heavy = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            node, _, kept = line.partition(" -> ")
            if not kept.strip():
                raise ValueError(f"{path.name}: {line!r} is no 'node id -> the fast test that keeps its idea'")
            heavy[node] = kept if "::" in kept else f"{node.split('::')[0]}::{kept}"
    return heavy


HEAVY: dict[str, str] = _read(Path(__file__).with_suffix(".txt"))
"""Each moved test's node id, and the node id or function of the fast test that keeps its idea."""
