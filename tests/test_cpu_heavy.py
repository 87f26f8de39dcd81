"""The fast tier's CPU rule (docs/testing.md, "Two tiers"): each test moved to the slow tier for its CPU is still
there, and the fast test named as keeping its idea is there too, not moved, not slow."""

import ast
import functools
from pathlib import Path

import pytest

from tests.support.cpu_heavy import BOUND_S, HEAVY
from tests.support.tier_head import head

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _module(path: str) -> ast.Module:
    """Each file parsed once for the checks (about 40 files, two names each); dropped after them."""
    return ast.parse((ROOT / path).read_text())


def _functions(path: str) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in _module(path).body if isinstance(node, ast.FunctionDef)}


def _marked_slow(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "slow" for n in ast.walk(node))


def test_each_moved_test_and_the_fast_test_that_keeps_its_idea_exist_and_the_kept_one_is_fast():
    missing, slow = [], []
    for moved, kept in HEAVY.items():
        for node in (moved, kept):
            path, name = node.split("::")
            if name.split("[")[0] not in _functions(path):
                missing.append(node)
        path, name = kept.split("::")
        marks = [
            n for n in _module(path).body if isinstance(n, ast.Assign) and "pytestmark" in ast.unparse(n.targets[0])
        ]
        function = _functions(path).get(name.split("[")[0])
        if (
            kept in HEAVY
            or any(map(_marked_slow, marks))
            or any(map(_marked_slow, getattr(function, "decorator_list", [])))
        ):
            slow.append(kept)
    _module.cache_clear()
    assert not missing, f"named in tests/support/cpu_heavy.txt, not found: {missing}"
    assert not slow, f"kept as the fast test of an idea, but slow: {slow}"


def test_the_head_takes_each_tests_least_cpu_and_lists_those_over_the_bound_in_every_run():
    runs = [{"a": 2.0, "b": BOUND_S + 0.5, "c": 0.01}, {"a": BOUND_S + 0.1, "b": 0.02, "c": 0.01}]
    lines = head(runs, top=2)
    assert lines[0] == f"3 tests, {BOUND_S + 0.1 + 0.02 + 0.01:.1f} s of CPU (least of 2 run(s) each)"
    assert lines[-3] == f"over {BOUND_S} s in every run: 1 tests, {BOUND_S + 0.1:.1f} s"
    assert lines[-2:] == [f"{BOUND_S + 0.1:6.3f}  a", f"{0.02:6.3f}  b"]


@pytest.mark.parametrize("line", ["tests/x.py::test_a test_b", "tests/x.py::test_a -> "])
def test_a_line_of_the_list_without_its_kept_test_is_refused(tmp_path, line):
    from tests.support.cpu_heavy import _read

    (tmp_path / "list.txt").write_text(f"# a comment\n{line}\n")
    with pytest.raises(ValueError, match="node id -> the fast test"):
        _read(tmp_path / "list.txt")
