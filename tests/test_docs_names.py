"""The names, signatures, option groups and limits the user pages give are the code's (griffe reads the source, as
the API reference does, so no torch import)."""

import ast
import re
from pathlib import Path

import griffe

from tests.support.docs_source import ROOT
from tests.support.docs_source import package as _package

DOTTED = re.compile(r"(?<![\w/.-])rlnb(?:\.[A-Za-z_]\w*)+(?!\w|\.?<)")
"""A dotted ``rlnb.x.y`` name in prose (not a file such as ``rlnb.json``, nor a tag such as ``rlnb.failure.<seq>``)."""


NOT_NAMES = {"rlnb.run_path"}
"""Dotted names the pages give that are no Python names: the tag a sink sets (``sinks.base``)."""


def _named(page: Path) -> set[str]:
    """The dotted rlnb names ``page`` gives; of docs/reliability.md, only those its rows' fix and test columns give:
    what a row says a release did may name what is gone since."""
    text = page.read_text(encoding="utf-8")
    if page.name == "reliability.md":
        text = "\n".join(cell for row in text.splitlines() if row.startswith("| ") for cell in row.split(" | ")[2:])
    return set(DOTTED.findall(text)) - NOT_NAMES


def test_every_rlnb_name_the_pages_give_exists():
    """docs/history.md named ``rlnb.completions``, which is ``rlnb.history.completions``, and docs/reliability.md
    ``rlnb.viz.texts.printable``, moved to ``rlnb._input.shown``: each dotted rlnb name the README and the docs give (in
    docs/reliability.md, what a fix and its test are) must be a module, class, function or attribute there (read from
    the source, as the API reference is, so no torch import)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing, checked = [], 0
    for page in pages:
        for name in sorted(_named(page)):
            if name.rsplit(".", 1)[1] in {"json", "jsonl", "md", "py", "X"}:
                continue
            checked += 1
            obj: griffe.Object | griffe.Alias = _package()
            for part in name.split(".")[1:]:
                if obj.is_attribute:  # a value's own method (``RETRYING.get``): past what rlnb defines
                    break
                if part not in obj.members:
                    missing.append(f"{page.name}: {name}")
                    break
                obj = obj.members[part]
                obj = obj.final_target if obj.is_alias else obj
    assert checked > 50, "the pages name few rlnb names: update this test"
    assert missing == []


def _default(fn: griffe.Object, default: str) -> object:
    """A parameter's default as a value: a literal, or a module constant (``STEP_WAIT``) read where ``fn`` finds it."""
    if re.fullmatch(r"[A-Z_][A-Z0-9_]*", default) and default in fn.module.members:
        found = fn.module.members[default]
        default = str((found.final_target if found.is_alias else found).value)
    try:
        return ast.literal_eval(default)
    except ValueError:
        return default


def _signature_mismatches(page: str, code: str) -> list[str]:
    """What ``code`` (``rlnb.x.Y(a, b=1)``: bare names, then keywords with literal values: a signature as a page
    writes it out) gets wrong about the callable: a parameter left out or not there, or a default not its own."""
    name, _, args = code.partition("(")
    call = ast.parse(f"f({args}", mode="eval").body
    assert isinstance(call, ast.Call)
    obj: griffe.Object | griffe.Alias = _package()
    for part in name.split(".")[1:]:
        obj = obj.members[part]
        obj = obj.final_target if obj.is_alias else obj
    fn = obj.all_members["__init__"] if obj.is_class else obj
    fn = fn.final_target if fn.is_alias else fn
    if any(p.kind.value == "variadic keyword" for p in fn.parameters):
        return []  # ``connect(url, base_model=...)``: a call, its keywords the ``**options`` it takes
    takes = {
        p.name: p for p in fn.parameters if p.name not in {"self", "cls"} and p.kind.value.startswith(("pos", "key"))
    }
    given = {a.id: None for a in call.args if isinstance(a, ast.Name)} | {k.arg: k.value for k in call.keywords}
    wrong = [f"{page}: {name} takes {p} (not given)" for p in takes if p not in given]
    wrong += [f"{page}: {name} takes no {g}" for g in given if g not in takes]
    for arg, value in given.items():
        default = takes[arg].default if arg in takes else None
        if value is not None and default is not None and ast.literal_eval(value) != _default(fn, str(default)):
            wrong.append(f"{page}: {name}({arg}={ast.unparse(value)}): its default is {takes[arg].default}")
    return wrong


def _is_signature(code: str) -> bool:
    """``rlnb.x.Y(a, b=1)``: bare names, then keywords with literal values (not a call such as ``Y("local", a=N)``)."""
    try:
        call = ast.parse(code, mode="eval").body
    except SyntaxError:
        return False
    if not isinstance(call, ast.Call) or not call.keywords or not all(isinstance(a, ast.Name) for a in call.args):
        return False
    try:
        return all(ast.literal_eval(k.value) is not ... and k.arg for k in call.keywords)
    except ValueError:
        return False


def test_every_signature_the_pages_write_out_is_the_code_s():
    """docs/widgets.md gave ``RunPanel(session, builder=None, ..., n_steps=20, step_timeout=600)`` without ``every``,
    docs/history.md gave ``LiveView(history, metrics=("reward",), ...)`` (its default is ``()``) and docs/tasks.md
    ``lesson.train`` without ``eval_every``: a signature a page writes out in full (``rlnb.x.Y(a, b=1)``, bare names
    and literal defaults) names every parameter the callable takes, each keyword with its default."""
    pages = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "reliability.md")]
    spans = [
        (page.name, code) for page in pages for code in re.findall(r"`(rlnb(?:\.\w+)+\([^`]*\))`", page.read_text())
    ]
    signatures = [(page, code) for page, code in spans if "..." not in code and "…" not in code and _is_signature(code)]
    assert len(signatures) >= 5, "the pages write out few signatures: update this test"
    assert [w for page, code in signatures for w in _signature_mismatches(page, code)] == []


GROUP_ROW = re.compile(r"`(\w+Options)` \((?:`[\w.]+`, )?`\w+=`(?:\) \| ([^|]+) \||: ([^)]+)\))")
"""A group's fields as docs/concepts.md (`` `X` (`x=`: `a`, `b`) ``) and the remote and sweeps tables
(`` | `X` (`module`, `x=`) | `a`, `b` | ``) list them."""


def test_every_option_group_the_pages_list_has_the_fields_its_class_has():
    """docs/sweeps.md's table listed ``TrialOptions`` without ``slot_timeout``: each group a page lists field by field
    names every field of its dataclass, and none it lacks (read from the source: no torch import)."""
    classes = {}
    for module in ("engine.options", "remote.client", "remote.start", "remote.waiting", "sweep.options"):
        classes |= {n: c for n, c in _package()[module].members.items() if n.endswith("Options") and c.is_class}
    pages = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "reliability.md")]
    rows = [(page.name, *m.groups()) for page in pages for m in GROUP_ROW.finditer(page.read_text(encoding="utf-8"))]
    assert len(rows) >= 10, "the pages list few option groups: update this test"
    wrong = []
    for page, group, cells, inline in rows:
        fields = [n for n, m in classes[group].members.items() if "instance-attribute" in m.labels]
        listed = re.findall(r"`(\w+)`", cells or inline)
        if sorted(listed) != sorted(fields):
            wrong.append(f"{page}: {group} lists {listed}, has {fields}")
    assert wrong == []


def _number(value: object) -> object:
    """A default as griffe reads it (``32 << 20``, ``10_000``, ``wire.MAX_STOP_STRINGS``) as its number."""
    if isinstance(value, griffe.ExprAttribute | griffe.ExprName):  # a constant defined elsewhere in rlnb
        found = _package()[value.canonical_path.removeprefix("rlnb.")]
        return _number((found.final_target if found.is_alias else found).value)
    tree = ast.parse(str(value), mode="eval")
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Name | ast.Attribute | ast.Call | ast.Subscript)]
    return eval(compile(tree, "default", "eval"), {"__builtins__": {}})  # constants and operators only


def test_the_server_limits_table_gives_every_limit_with_its_default():
    """docs/server.md#limits is where ``rlnb serve --limit`` sends a reader (its help and its refusals name it): each
    limit ``--limit`` takes has its row, and the row's first figure for it is ``ServerSettings``' default (read from
    the source: importing rlnb.server takes seconds)."""
    module = _package()["server.settings"]
    limits = [
        n for kind in ("_COUNTS", "_BYTES", "_SECONDS", "_TTLS") for n in ast.literal_eval(str(module[kind].value))
    ]
    fields = module["ServerSettings"].members
    page = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    table = page[page.index("| limit | default | past it |") :].split("\n\n")[0].splitlines()[2:]
    unit = {"": 1, "MiB": 1 << 20, "GiB": 1 << 30}
    given, sums = {}, {}
    for row in table:
        names, default = re.findall(r"`(\w+)`", row.split("|")[1]), row.split("|")[2]
        figures = [int(n.replace(",", "")) * unit[u] for n, u in re.findall(r"(\d[\d,]*)(?: (MiB|GiB)\b)?", default)]
        given |= dict(zip(names, figures, strict=False))
        summed = re.match(r" `(\w+)`(?: \+ `(\w+)`)+", default)  # a default worked out from others (None in source)
        sums |= dict.fromkeys(names, re.findall(r"`(\w+)`", summed.group(0)) if summed else [])
    assert sorted(given) == sorted(limits)

    def default(name: str) -> object:
        if fields[name].value == "None":  # the row says which defaults it adds up, and the figure is their sum
            assert sums[name], f"{name}: its default is None: its row must start with what it is worked out from"
            return sum(int(_number(fields[n].value)) for n in sums[name])
        return _number(fields[name].value)

    assert {name: fields[name].value for name in given if given[name] != default(name)} == {}
