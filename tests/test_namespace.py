"""``rlnb/__init__.py`` names each error class once at run time, in ``__all__`` (every name of it that is no
submodule and has no module in ``rlnb._MODULES`` comes from ``rlnb.errors``): they were listed twice (``_ERRORS`` and
``__all__``), kept in step by a test only. Its ``if TYPE_CHECKING`` imports are the type checker's and the API
reference's list (``tests/test_project.py`` keeps them the same)."""

import ast
import collections
from pathlib import Path

import rlnb

TREE = ast.parse(Path(rlnb.__file__).read_text())


def _guarded(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def test_each_error_name_is_spelled_once_in_the_run_time_code():
    guarded = next(n for n in TREE.body if _guarded(n))
    errors = [a.name for n in ast.walk(guarded) if isinstance(n, ast.ImportFrom) and n.module == "rlnb.errors"
              for a in n.names]  # fmt: skip
    run_time = [n for n in TREE.body if not _guarded(n)]
    docs = {id(n.value) for n in run_time if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    words = collections.Counter(
        word
        for node in run_time
        for c in ast.walk(node)
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and id(c) not in docs
        for word in c.value.split()
    )
    assert len(errors) > 10 and {name: words[name] for name in errors if words[name] != 1} == {}


def test_the_names_without_a_module_of_their_own_are_the_exceptions_of_rlnb_errors():
    errors = {name for name, module in rlnb._PUBLIC.items() if module == "rlnb.errors"}
    assert {"APIError", "RunLocked", "InvalidParams"} <= errors and not errors & set(rlnb._MODULES)
    for name in errors:
        assert issubclass(getattr(rlnb, name), Exception), name
