"""One definition per idea in the history modules: the checks of a loaded value (``record.fits_int64``,
``record.fits_float``) are public helpers, not another module's private names, and the strings JSON spells the
non-finite floats with come from the wire schema's one definition (``wire.NON_FINITE_JSON``), which the export
reads and writes with."""

import ast
import math
from pathlib import Path

import pandas as pd

from rlnb import wire
from rlnb.history import export, record

RLNB = Path(__file__).resolve().parents[2] / "rlnb"


def _modules(folder: Path) -> dict[str, ast.Module]:
    return {str(p.relative_to(RLNB.parent)): ast.parse(p.read_text()) for p in sorted(folder.rglob("*.py"))}


def test_no_history_module_imports_a_private_name_of_another_module():
    private = [
        f"{path}: {a.name} from {node.module}"
        for path, tree in _modules(RLNB / "history").items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for a in node.names
        if a.name.startswith("_") and not (node.module or "").endswith(a.name)
    ]
    assert private == []


def _strings(tree: ast.Module) -> set[str]:
    """The string constants of a module, less its docstrings."""
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef) and n.body
        and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
    }  # fmt: skip
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}  # fmt: skip


def test_the_non_finite_spelling_is_defined_in_one_module_and_the_export_takes_it():
    spelling = {"NaN", "Infinity", "-Infinity"}
    texts = {str(p.relative_to(RLNB.parent)): p.read_text() for p in sorted(RLNB.rglob("*.py"))}
    maybe = [path for path, text in texts.items() if "Infinity" in text or "NaN" in text]  # parsed: the few
    spelled_in = sorted(path for path in maybe if _strings(ast.parse(texts[path])) & spelling)
    assert spelled_in == ["rlnb/wire/base.py"]
    assert set(wire.NON_FINITE_JSON) == spelling
    frame = pd.DataFrame({"metrics": [{"a": -math.inf, "b": math.nan, "c": math.inf}], "params": [{}]})
    text = export.with_json(frame)["metrics"][0]
    assert text == '{"a":"-Infinity","b":"NaN","c":"Infinity"}'
    back = export.from_json_text(text)
    assert back["a"] == -math.inf and math.isnan(back["b"]) and back["c"] == math.inf


def test_each_record_field_has_one_shape_and_the_float_and_time_columns_are_its_shapes():
    """``record.SHAPES`` is the one description of a field's type: a load checks by it, the table's columns by it."""
    assert tuple(record.SHAPES) == record.COLUMNS
    assert record.FLOATS == ("loss", "grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate")
    assert record.TIMES == ("submitted_at", "started_at", "finished_at")
