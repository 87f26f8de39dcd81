"""The API reference: every public name on it has a docstring (mkdocstrings alone renders a bare signature)."""

import ast
import builtins
import re
import shlex
import subprocess
import symtable
import sys
from pathlib import Path

import griffe
import pytest

from tests.support.docs_source import ROOT
from tests.support.docs_source import package as _package

API = ROOT / "docs" / "api"


def _documented_modules() -> list[str]:
    """The modules the reference pages render (``::: rlnb.x`` lines), so the check covers exactly the site."""
    found = [m for page in sorted(API.glob("*.md")) for m in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M)]
    assert found, "no ::: directives under docs/api"
    return found


def _public_members(obj: griffe.Object | griffe.Alias) -> list[griffe.Object | griffe.Alias]:
    """What mkdocstrings renders with ``filters: public``: ``__all__`` where a module has one, else names
    without a leading underscore defined there. Python's own special methods (``__repr__``, ...) say what
    they do by their name."""
    members = []
    for name, member in obj.members.items():
        if not member.is_public or member.is_module or (name.startswith("__") and name.endswith("__")):
            continue
        members.append(member)
    return members


def _undocumented(module: str) -> list[str]:
    root = _package() if module == "rlnb" else _package()[module.removeprefix("rlnb.")]
    missing, seen = [], set()

    def visit(obj: griffe.Object | griffe.Alias, shown_as: str) -> None:
        target = obj.final_target if obj.is_alias else obj
        if target.path in seen:
            return
        seen.add(target.path)
        if not target.docstring or not target.docstring.value.strip():
            missing.append(shown_as if shown_as == target.path else f"{shown_as} (defined in {target.path})")
        if target.is_module or target.is_class:
            for member in _public_members(target):
                # A class's fields are described by its docstring; methods and properties need their own.
                if target.is_class and member.is_attribute and "property" not in member.labels:
                    continue
                visit(member, f"{shown_as}.{member.name}")

    visit(root, module)
    return missing


@pytest.mark.parametrize("module", _documented_modules())
def test_every_public_name_in_the_api_reference_has_a_docstring(module):
    missing = _undocumented(module)
    assert not missing, f"{len(missing)} public names on the API reference without a docstring:\n" + "\n".join(missing)


def test_every_relative_link_resolves_in_the_repository():
    """Pages link to files as they lie in the repository, so they read correctly on GitHub too
    (docs/hooks.py maps the links for the site, whose strict build checks them there)."""
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"^\s*(```|~~~).*?^\s*\1", "", page.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)", text):
            path = target.partition("#")[0]
            if path and not re.match(r"^[a-z]+:", path) and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


@pytest.mark.slow
def test_the_readme_python_examples_run(tmp_path, monkeypatch):
    """The tour and the notebook example, in one namespace as a reader would paste them (the remote example
    needs a server and an account: tests/remote covers it)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    local = [b for b in blocks if "https://" not in b]
    assert len(local) == 2, "the README's local examples changed: update this test"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLNB_RUNS_DIR", raising=False)
    namespace: dict = {}
    tour, notebook = local
    exec(compile(tour, "README.md", "exec"), namespace)
    try:
        assert namespace["step"].result().step == 1
        assert len(namespace["out"].results[0].sequences) == 4
        kinds = ["forward-backward", "optim-step", "weights-sync", "sample"]
        assert namespace["session"].history.df["kind"].tolist() == kinds
    finally:
        namespace["session"].close()
    try:
        exec(compile(notebook, "README.md", "exec"), namespace)
        assert namespace["panel"].session is namespace["session"]
        assert set(namespace["trials"].status) == {"COMPLETED"} and len(namespace["trials"]) == 6
        assert len(namespace["summarize"](namespace["trials"])) == 3
    finally:
        namespace["panel"].close()
        namespace["session"].close()


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True])
def test_the_readme_site_build_fails_on_a_broken_link(tmp_path, broken):
    """The README test command's own ``mkdocs build`` arguments, on a one-page site: a broken link must fail
    it (``-q`` would silence the warnings that ``--strict`` counts, and the build would pass)."""
    readme = (ROOT / "README.md").read_text()
    test_cmd = next(c for c in re.findall(r"```bash\n(.*?)\n```", readme, re.S) if "pytest" in c)
    build = next(part for part in test_cmd.split("&&") if "mkdocs" in part)
    args = shlex.split(build)[1:]
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text("site_name: check\n")
    (tmp_path / "docs" / "index.md").write_text("# Check\n\n" + ("[gone](missing.md)\n" if broken else "Fine.\n"))
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", *args, "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode != 0) == broken, done.stderr


def _preset_values(preset: dict) -> str:
    """A preset's values as docs/widgets.md's table gives them: Adam session / Muon session."""
    a, m = preset["adam"], preset["muon"]
    aux = {k: v for k, v in a.items() if k != "grad_clip_norm"}  # the clip is Muon's own: one global norm
    assert preset["muon.adam"] == aux, "the table says a Muon session's AdamW is the Adam session's: it is not"

    def clip(v: float) -> str:
        return f"clip {v:g}" if v else "no clipping"

    adam = f"AdamW lr {a['learning_rate']:g}, betas {a['beta1']:g}/{a['beta2']:g}, eps {a['eps']:g}, "
    adam += f"wd {a['weight_decay']:g}, {clip(a['grad_clip_norm'])}"
    muon = f"Muon lr {m['learning_rate']:g}, momentum {m['momentum']:g}, {m['newton_schulz_steps']} NS steps, "
    muon += f"wd {m['weight_decay']:g}, {clip(m['grad_clip_norm'])}"
    return f"{adam} / {muon}, + that AdamW"


def test_the_widgets_page_gives_the_presets_as_presets_py_has_them():
    """docs/widgets.md said preset="Learns in 30 steps" and AdamW 0.01 long after both had changed: its presets
    table (values and claims), the builder's default and its summary example are checked against the code."""
    from rlnb.widgets import LESSONS, PRESETS, OptimizerBuilder
    from rlnb.widgets.presets import DEFAULT_PRESET

    page = (ROOT / "docs" / "widgets.md").read_text()
    table = page[page.index("| preset | values (Adam session / Muon session) |") :].split("\n\n")[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()[2:]]
    assert [name for name, _, _ in rows] == [f"**{n}** (default)" if n == DEFAULT_PRESET else n for n in PRESETS]
    for (_, values, claim), (name, preset) in zip(rows, PRESETS.items(), strict=True):
        assert values == _preset_values(preset), name
        assert claim == LESSONS[name].claim, name
    assert f'preset="{DEFAULT_PRESET}"' in page
    named = set(re.findall(r"preset ([A-Z][\w ()]+?steps)", page)) | set(re.findall(r"Learns in \d+ steps", page))
    assert named <= set(PRESETS), named
    b = OptimizerBuilder("muon", total_steps=30)
    b.sched_kind.value, b.warmup.value = "cosine", 3
    assert f"`{b.summary}`" in page


PAGE_CONTEXT = {"sampling.md": "session", "sweeps.md": "session"}
"""Names a page's examples take from the reader's notebook (a session made earlier), beside ``rlnb`` (every page)."""


def _page_code(page: Path) -> str:
    """The page's ```python blocks, top to bottom, at their own line numbers (every other line blank); line 1 (a
    heading) binds the names the page assumes, so one undefined name is reported at its line of the page."""
    lines = [""] * len(page.read_text().splitlines())
    for found in re.finditer(r"^( *)```python\n(.*?)^\1```", page.read_text(), re.S | re.M):
        first = page.read_text().count("\n", 0, found.start(2))
        for i, line in enumerate(found.group(2).splitlines()):
            lines[first + i] = line.removeprefix(found.group(1))
    if any(lines):
        lines[0] = " = ".join(["rlnb", *PAGE_CONTEXT.get(page.name, "").split(), "None"])
    return "\n".join(lines) + "\n"


def _undefined(code: str, filename: str) -> list[str]:
    """``file:line: name`` for each name ``code`` reads that neither it (at module level) nor Python's builtins
    bind: what the interpreter would raise NameError on (pyflakes' F821, without starting ruff: a fast test)."""
    tree = ast.parse(code, filename)  # a SyntaxError names the page and the line
    module = symtable.symtable(code, filename, "exec")
    bound = {s.get_name() for s in module.get_symbols() if s.is_assigned() or s.is_imported()}
    read_as_global, tables = set(), [module]
    while tables:
        table = tables.pop()
        read_as_global |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and s.is_global()}
        tables.extend(table.get_children())
    missing = read_as_global - bound - set(dir(builtins))
    return [f"{filename}:{node.lineno}: {node.id}" for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in missing]  # fmt: skip


def test_every_docs_python_example_compiles_and_uses_no_undefined_name():
    """Only the README's examples were run: docs/sweeps.md's first one used ``base`` it never defined (so ``ablate(base,
    ...)`` as printed was a NameError), and docs/sinks.md ``base`` and ``grid``. Each page's blocks, read as one
    script (later blocks use what earlier ones made), must compile and bind every name they read."""
    checked, undefined = 0, []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        code = _page_code(page)
        if code.strip():
            checked += 1
            undefined += _undefined(code, page.relative_to(ROOT).as_posix())
    assert checked >= 8, "docs pages with python examples went missing: update this test"
    assert not undefined, "docs examples use names they never define:\n" + "\n".join(sorted(undefined))


def test_every_test_the_docs_name_exists():
    """docs/reliability.md names the test of each defence (and other pages some too): a test renamed or moved left
    rows naming none (five did), so each ``tests/<file>.py::<name>`` the docs give must be a test function there."""
    named = [(page.name, path, name) for page in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
                                                  ROOT / "bench" / "README.md"]
             for path, name in re.findall(r"(tests/[\w/]+\.py)::(\w+)", page.read_text(encoding="utf-8"))]  # fmt: skip
    assert len(named) > 500
    missing = [
        f"{page}: {path}::{name}"
        for page, path, name in named
        if not (ROOT / path).is_file()
        or not re.search(rf"^\s*(async )?def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []


def test_every_test_the_docs_name_by_its_file_or_name_alone_exists():
    """Rows also name a test by its file alone (``test_memory.py::test_x``) or, after a first one, by ``::test_x``:
    those escaped the check above, and a renamed test left a row naming none."""
    tests = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests").rglob("*.py"))]
    defined = {name for text in tests for name in re.findall(r"^\s*(?:async )?def (test_\w+)\(", text, re.M)}
    named = [(page.name, name) for page in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
                                            ROOT / "bench" / "README.md"]
             for name in re.findall(r"(?<![\w/])(?:test_\w+\.py)?::(test_\w+)", page.read_text("utf-8"))]  # fmt: skip
    assert len(named) > 100  # those with their path are checked above
    assert [f"{page}: ::{name}" for page, name in named if name not in defined] == []


def test_connect_and_concepts_name_every_option_group_connect_takes():
    """``connect.__doc__`` named three of the four in-process groups (``ComputeOptions`` was left out): each group a
    backend's entry point takes (a keyword typed ``XOptions | None``) must be named by connect's docstring and by the
    options table in docs/concepts.md (rlnb read from its source, as for the API reference: no torch import)."""
    package = _package()
    entries = (
        package["engine.backend"]["LocalBackend"]["__init__"],
        package["remote.backend"]["RemoteBackend"]["connect"],
    )
    groups = {
        match.group(1)
        for entry in entries
        for p in entry.parameters
        if (match := re.fullmatch(r"(\w+Options) \| None", str(p.annotation)))
    }
    assert len(groups) == 7, groups  # four in process, three remote: update this test if one is added
    docstring = package["session.connect"]["connect"].docstring
    concepts = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    for text in (docstring.value if docstring else "", concepts):
        assert sorted(g for g in groups if not re.search(rf"\b{g}\b", text)) == []


HISTORY = re.compile(
    r"\bround \d+\b|\bsession \d+\b|\bissue \d+\b|\bused to\b|\bit said\b|\(it was\b|; it was\b|\bwhere it was\b"
    r"|\bthis page gave\b|\bas it did\b|\bwhere it (?:had|paid)\b|\bit got before\b"
    r"|\bthe old (?:test|view|refresh|version)\b"
    r"|[(;:] (?:it|they) (?:were|went|kept|made|failed|raised|ran|took|hung|crashed|showed|broke|read|said|listened"
    r"|gave|got|wrote|stayed|lost|grew|stepped|did)\b",
    re.I,
)
"""Wording that tells what rlnb did once ("it used to ...", "(it was a bare KeyError)", "in round 3, session 21",
"...: it kept showing the last valid schedule", "where it paid 1"): that belongs in bench/README.md and the notes, and
in docs/reliability.md's rows, not in the user pages. A reason says what would happen: "(it would ...)"."""


def test_the_user_pages_say_what_the_library_does_not_what_it_did():
    """After 29 sessions the pages carried ~150 clauses of history ("used to", "(it was ...)", "session 28"), which a
    reader has to read past to learn what happens now: the README and docs/*.md (reliability.md aside) hold none."""
    pages = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name != "reliability.md")]
    found = [
        f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for page in pages
        for text in [page.read_text(encoding="utf-8")]
        for m in HISTORY.finditer(text)
    ]
    assert found == [], "history in the user pages:\n" + "\n".join(found)


def test_every_docs_page_is_in_the_site_nav_and_linked_from_the_readme():
    """A page no link reaches is a page no reader finds: each docs/*.md is in mkdocs.yml's nav (the site) and linked
    from the README (GitHub, where the README is the home page)."""
    nav = set(re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M))
    readme_links = {t.partition("#")[0] for t in re.findall(r"\]\(([^)\s]+)", (ROOT / "README.md").read_text("utf-8"))}
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in sorted((ROOT / "docs").rglob("*.md"))]
    assert len(pages) >= 15, "docs pages went missing: update this test"
    assert [p for p in pages if p not in nav] == [], "pages missing from mkdocs.yml's nav"
    top = [p for p in pages if "/" not in p or p == "api/index.md"]
    assert [p for p in top if f"docs/{p}" not in readme_links] == [], "pages the README does not link"


def test_the_optimizers_page_gives_the_defaults_the_engine_uses():
    """docs/optimizers.md's table is where a reader looks up what an unset field means: each row's default must be
    ``ADAM_DEFAULTS`` / ``MUON_DEFAULTS``, the values the engine fills in."""
    from rlnb.params import ADAM_DEFAULTS, MUON_DEFAULTS

    page = (ROOT / "docs" / "optimizers.md").read_text(encoding="utf-8")
    given: dict[tuple[str, str], float] = {}
    for opt, fields, default in re.findall(r"^\| (Adam|Muon) ([^|]+?) \| [^|]+ \| ([^|]+) \|$", page, re.M):
        names = re.findall(r"`(\w+)`", fields)
        values = re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", default)
        for name, value in zip(names, values, strict=False):
            given[(opt, name)] = float(value)
    expected = {("Adam", k): float(v) for k, v in ADAM_DEFAULTS.items()}
    expected |= {("Muon", k): float(v) for k, v in MUON_DEFAULTS.items()}
    assert given == expected


def test_the_extras_table_names_every_extra_pyproject_has():
    """docs/getting-started.md's extras table is the one list of what each install brings: every extra in
    pyproject.toml has its row, no row names an extra that is gone, and `all` leaves out exactly what its row says."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    table = page[page.index("| extra | brings | for |") :].split("\n\n")[0].splitlines()[2:]
    rows = {name: line for line in table for name in re.findall(r"`([\w-]+)`", line.split("|")[1])}
    assert sorted(rows) == sorted(extras)
    in_all = set(re.fullmatch(r"rlnb\[([\w,-]+)\]", extras["all"][0]).group(1).split(","))  # type: ignore[union-attr]
    left_out = set(re.findall(r"`([\w-]+)`", rows["all"].split("|")[2]))
    assert in_all == set(extras) - {"all", "docs", "dev"} - left_out


def test_the_architecture_page_gives_the_layers_test_project_holds():
    """docs/architecture.md's layer table is the map a contributor follows: it must be tests/test_project.py's
    ``LAYERS`` (read from its source: a test module never imports another), which left `_chat_marks` off the page."""
    tree = ast.parse((ROOT / "tests" / "test_project.py").read_text(encoding="utf-8"))
    layers = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["LAYERS"]
    )
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| (\d+) \| (.+) \|$", page, re.M)
    assert [(int(n), sorted(re.findall(r"`(\w+)`", names))) for n, names in table] == [
        (i, sorted(layer)) for i, layer in enumerate(layers)
    ]
