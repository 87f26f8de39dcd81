"""Project-level checks: the public namespace, the two README commands, CI, import order."""

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import get_args

import pytest
import yaml

import rlnb

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_complete_and_classes_live_in_rlnb():
    public = {n for n in dir(rlnb) if not n.startswith("_")}
    modules = {u for layer in LAYERS for u in layer}
    assert sorted(rlnb.__all__) == rlnb.__all__
    assert public - modules - {"annotations"} <= set(rlnb.__all__) | {"samples", "wire"}
    for name in rlnb.__all__:
        obj = getattr(rlnb, name)
        if isinstance(obj, type):
            assert obj.__module__ == "rlnb", name


def test_each_lazy_name_comes_from_the_module_its_type_checking_import_names():
    """``rlnb.__init__`` lists each public name twice, for the type checker and the reference (``if TYPE_CHECKING``
    imports) and for the run time (``_PUBLIC``): the two say the same module, and together they are ``__all__``."""
    tree = ast.parse((ROOT / "rlnb" / "__init__.py").read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    imported = {a.name: f"{n.module}.{a.name}" if n.module == "rlnb" else n.module
                for n in guarded.body if isinstance(n, ast.ImportFrom) for a in n.names}  # fmt: skip
    lazy = {name: f"rlnb.{name}" for name in rlnb.__all__ if name in rlnb._SUBMODULES}
    assert imported == rlnb._PUBLIC | lazy
    assert set(imported) == set(rlnb.__all__)
    units = {p.name.removesuffix(".py") for p in (ROOT / "rlnb").iterdir() if p.suffix == ".py" or p.is_dir()}
    assert {u for u in units if not u.startswith("_")} == rlnb._SUBMODULES
    assert {n for n in dir(rlnb) if not n.startswith("_")} == set(rlnb.__all__) | rlnb._SUBMODULES


@pytest.mark.slow
def test_every_subpackage_is_an_attribute_of_a_bare_import_rlnb_loaded_on_first_use():
    """``import rlnb`` imported pandas, pydantic and numpy (0.6-2.5 s, ``rlnb --help``'s time too); now each public
    name and subpackage is imported on first use (the README's tour calls ``rlnb.viz.plots.overview``), and a class
    shows as ``rlnb.X`` once reached from ``rlnb``, also one its module raised before."""
    code = (
        "import sys, rlnb\n"
        "heavy = {'torch', 'pandas', 'pydantic', 'numpy', 'matplotlib', 'ipywidgets', 'fastapi'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
        "from rlnb.errors import InvalidParams\n"
        "print(InvalidParams.__module__, rlnb.connect.__module__, InvalidParams.__module__)\n"
        "print(all(getattr(rlnb, n) is not None for n in rlnb.__all__), rlnb.History.__module__)\n"
        "print(rlnb.viz.plots.overview.__name__, rlnb.sweep.lr_find.__name__, rlnb.testing.__name__)\n"
        "try:\n    rlnb.vis\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == [
        "[]",
        "rlnb.errors rlnb.session.connect rlnb",
        "True rlnb",
        "overview lr_find rlnb.testing",
        "module 'rlnb' has no attribute 'vis'",
    ]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = next(c for c in commands if "pytest" in c)
    demo_cmd = next(c for c in commands if "rlnb demo" in c)
    assert test_cmd in ci.splitlines()
    assert "constraints.txt" in demo_cmd and "constraints.txt" in test_cmd


@pytest.mark.slow  # two pytest processes
def test_notebooks_run_under_the_readme_commands_nbval_and_stop_a_tier_without_it():
    """``addopts`` leaves nbval out (its imports cost each fast-tier process 1.2 s of CPU): the README's command
    loads it and collects the notebook's cells; a slow tier without it stops instead of skipping them in silence."""
    readme = (ROOT / "README.md").read_text()
    test_cmd = next(c for c in re.findall(r"```bash\n(.*?)\n```", readme, re.S) if "pytest" in c)
    flags = test_cmd.split("-m 'slow or not slow' ")[1].removesuffix(" tests notebooks").split()
    notebook = "notebooks/01-quickstart.ipynb"
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "slow", "--collect-only", notebook]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*pytest_cmd, *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)

    loaded = run(*flags)
    assert loaded.returncode == 0 and f"{notebook}::Cell 0" in loaded.stdout, loaded.stdout + loaded.stderr
    without = run()
    assert without.returncode != 0 and "notebooks run under nbval; add -p nbval --nbval-lax" in without.stdout


def test_torch_is_pinned_exactly_and_pyproject_keeps_a_range():
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in pins
    assert not any("+cpu" in p or p.startswith(("nvidia", "triton")) for p in pins)
    assert re.search(r'"torch>=[\d.]+,<[\d.]+"', (ROOT / "pyproject.toml").read_text())


def test_mypy_checks_a_comparison_with_a_kind():
    """``kind == "adamw"`` of an ``OptimizerKind`` (or of a ``MuonScaling``) can never hold: with ``strict_equality``
    mypy says so, where a misspelt catalogue name type-checked clean."""
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"].get("strict_equality") is True


def test_environment_yml_mirrors_the_pip_install():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["-c constraints.txt", "-e .[dev,all]"]


LAYERS = [
    ["_input", "lifecycle", "secrets"],
    ["wire"],
    ["errors", "_extras", "_hosts", "_one_step"],
    ["text", "_files"],
    ["params", "samples", "history"],
    ["sinks"],
    ["engine", "remote"],
    ["session"],
    ["tasks", "testing"],
    ["batched", "server", "viz"],
    ["sweep"],
    ["widgets"],
    ["cli"],
]
"""The package's folders and top-level modules, bottom up: each may import only from its own layer's
lower layers, and never a neighbour of its own layer (so ``engine`` and ``remote`` never import each other)."""


@pytest.fixture(scope="module")
def rlnb_nodes() -> dict[Path, tuple[ast.AST, ...]]:
    """Every node of each module of rlnb, parsed once for the four checks that walk them all (each parse of the
    package costs about a second of CPU); dropped with this module's tests, not kept for the garbage collector
    to walk through the rest of the session."""
    return {path: tuple(ast.walk(ast.parse(path.read_text()))) for path in sorted((ROOT / "rlnb").rglob("*.py"))}


def _rlnb_imports(nodes: tuple[ast.AST, ...]) -> set[str]:
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlnb"):
            parts = node.module.split(".")
            if len(parts) > 1:
                found.add(parts[1])
            else:
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("rlnb."))
    return found


def test_every_module_has_a_layer():
    units = {p.name.removesuffix(".py") for p in (ROOT / "rlnb").iterdir() if p.suffix == ".py" or p.is_dir()}
    units -= {"__init__", "__pycache__"}
    assert units == {u for layer in LAYERS for u in layer}


def test_imports_only_go_down(rlnb_nodes):
    """Each folder or top-level module imports only from the layers below its own (``LAYERS``, the table in
    docs/architecture.md: wire near the bottom, cli at the top), never upward nor from a neighbour of its layer."""
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    upward = []
    for path, nodes in rlnb_nodes.items():
        rel = path.relative_to(ROOT / "rlnb")
        me = rel.parts[0].removesuffix(".py")
        if me == "__init__":
            continue
        upward += [f"{rel} imports rlnb.{dep}" for dep in _rlnb_imports(nodes) - {me} if rank[dep] >= rank[me]]
    assert not upward, "imports that do not go down a layer:\n" + "\n".join(upward)


def _module_imports(path: Path, nodes: tuple[ast.AST, ...]) -> set[str]:
    """The dotted names a module imports (and ``pkg.name`` for each ``from pkg import name``), wherever the import is:
    one inside a function delays a cycle, it does not remove it. Those under ``if TYPE_CHECKING:`` never run."""
    me = ".".join(path.relative_to(ROOT).with_suffix("").parts).split(".")
    typing_only = {
        id(inner)
        for node in nodes
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import) and id(node) not in typing_only:
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and id(node) not in typing_only:
            base = ".".join([*me[: len(me) - node.level], *([node.module] if node.module else [])])
            module = base if node.level else node.module or ""
            found |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return found


def test_no_modules_import_each_other(rlnb_nodes):
    """No import cycle between rlnb's modules (a package's ``__init__`` aside), counting the imports inside functions:
    such an import only hid one (widgets' builder → finder → own_probe → steps → builder, sinks' base ↔ watched), and
    a module that cannot be imported before the other is one idea in two places."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in rlnb_nodes if p.name != "__init__.py"}
    edges = {name: _module_imports(path, rlnb_nodes[path]) & modules.keys() - {name} for name, path in modules.items()}
    cycles, done = [], set()
    for start in sorted(modules):  # a path back to ``start`` through modules not yet started from
        stack, seen = [(start, [start])], {start}
        while stack:
            name, trail = stack.pop()
            for dep in sorted(edges[name] - done):
                if dep == start:
                    cycles.append(" → ".join([*trail, start]))
                elif dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*trail, dep]))
        done.add(start)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_nothing_reads_the_shared_reference_folder():
    needle = "../" + "shared"
    for path in [*(ROOT / "rlnb").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        assert needle not in path.read_text(), path


MAY_IMPORT_TESTS = re.compile(
    r"(?:^|;)[ \t]*(?:from[ \t]+tests\b|import\b[^\n]*\btests\.)[^\n]*(?:\btest_|\(|\\$)", re.M
)
"""A line that may import a test module: ``import tests.a.test_b`` (also after other names), ``from tests.a.test_b
import c``, ``from tests.a import test_b``, or ``(`` or ``\\`` and the names on the lines below; also after a ``;``.
Only the files that have one are parsed (7 of the 225 that name ``tests``: parsing all of those took about a second
of CPU)."""


def _test_module_imports(text: str) -> list[int]:
    """The lines of ``text`` (a module) that import a test module."""
    if not MAY_IMPORT_TESTS.search(text):
        return []
    found = []
    for node in ast.walk(ast.parse(text)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        if any(re.fullmatch(r"tests(\.\w+)*\.test_\w+", name) for name in names):
            found.append(node.lineno)
    return found


def test_no_test_module_imports_another():
    """Helpers and fixtures two test modules share live in ``tests/support`` (or a ``conftest.py``): a test module
    imported by another runs its module-level code twice, and its ``pytestmark`` silently marks the importer."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line in _test_module_imports(path.read_text())
    ]
    assert not found, "test modules that import a test module (move what they share to tests/support):\n" + "\n".join(
        found
    )


def test_the_test_module_import_check_sees_each_form_of_import():
    forms = [
        "import tests.a.test_b",
        "import os, tests.test_b as b",
        "from tests.a.test_b import c",
        "from tests.a import test_b",
        "from tests.a import (\n    c,\n    test_b,\n)",
        "if True:\n    from tests import test_b",
        "from tests.a import \\\n    test_b",
        "x = 1; from tests.a import test_b",
        "x = 1;import tests.a.test_b",
    ]
    assert [_test_module_imports(form) for form in forms] == [[1], [1], [1], [1], [1], [2], [1], [1], [1]]
    assert _test_module_imports("import tests.support\nfrom tests.support.server import (\n    wait,\n)") == []


def _wire_strings() -> dict[str, str]:
    """Every operation kind, status, error code, loss type, loss metric key and GRPO option string (and each error
    code's short name, as ``wire.error_code`` takes it) → the catalogue member to name instead."""
    from rlnb import wire

    catalogues = [
        wire.OperationKind,
        wire.OperationStatus,
        wire.OperationErrorCode,
        wire.SessionStatus,
        wire.SessionErrorCode,
        wire.ModelResourcesStatus,
        wire.ModelResourcesErrorCode,
        wire.TrialStatus,
        wire.LossMetric,
    ]
    found = {m.value: f"wire.{c.__name__}.{m.name}" for c in catalogues for m in c}
    found |= {m.name: f"wire.OperationErrorCode.{m.name}" for m in wire.OperationErrorCode}
    found |= {v: f'wire.LOSS_NAMES["{k}"]' for k, v in wire.LOSS_NAMES.items()}
    found |= {
        v: f'wire.loss_params.GRPO_PARAM_NAMES["{field}"]["{k}"]'
        for field, names in wire.loss_params.GRPO_PARAM_NAMES.items()
        for k, v in names.items()
    }
    found |= {name: f"a wire.MuonScaling constant (wire.MUON_{name.upper()})" for name in wire.MUON_SCALING}
    spelt = ("CheckpointType", "CheckpointVariant", "DType", "StopReason", "WeightSyncType", "MuonScalingStrategy")
    for alias in spelt:  # the spec's prefixed strings ("adam" or "int64" name other things too)
        found |= {v: f"a wire constant of wire.{alias} (add one if none)" for v in get_args(getattr(wire, alias))}
    return found


def _wire_literals(nodes: tuple[ast.AST, ...], strings: dict[str, str]) -> list[ast.Constant]:
    """The string constants among a module's ``nodes`` that spell a catalogue member, docstrings left out (prose
    may name a kind)."""
    docs = {
        id(node.value)
        for node in nodes
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }
    return [n for n in nodes if isinstance(n, ast.Constant) and n.value in strings and id(n) not in docs]


def test_kinds_statuses_and_error_codes_are_named_from_wire_only(rlnb_nodes):
    """One catalogue per idea: outside ``rlnb/wire`` a kind, status, error code or loss type is a wire member
    (``wire.OperationKind.OPTIM_STEP``), never its string, so a change touches one place."""
    strings = _wire_strings()
    found = []
    for path, nodes in rlnb_nodes.items():
        rel = path.relative_to(ROOT)
        if rel.parts[1] != "wire":
            for node in _wire_literals(nodes, strings):
                found.append(f"{rel}:{node.lineno}: {node.value!r} (use {strings[node.value]})")
    assert not found, "kind / status / error-code strings outside rlnb/wire:\n" + "\n".join(found)


KIND_STRINGS = frozenset({"adam", "muon"})
"""``wire.ADAM`` and ``wire.MUON`` spelt out; ``_wire_strings`` leaves them out, as ``adam`` is also Muon's field."""


def _spelt_kinds(nodes: tuple[ast.AST, ...]) -> list[ast.expr | ast.stmt]:
    """The comparisons with an optimizer kind's string (``== "muon"``, ``in ("adam", ...)``) and the defaults of a
    parameter or field named ``optimizer`` that spell one: a ``Compare`` or a default, not any constant. ``adam`` is
    also Muon's field (``name == "adam"`` in params): a comparison with ``"adam"`` counts where the other side names an
    ``optimizer`` or a ``kind``; one with ``"muon"``, which names no field, counts always."""

    def spelt(node: ast.AST | None, kinds: frozenset[str] = KIND_STRINGS) -> bool:
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(spelt(e, kinds) for e in node.elts)
        return isinstance(node, ast.Constant) and node.value in kinds

    def compares_a_kind(node: ast.Compare) -> bool:
        sides = [node.left, *node.comparators]
        named = any(re.search(r"optimizer|kind", ast.unparse(side)) for side in sides if not spelt(side))
        return any(spelt(side, KIND_STRINGS if named else frozenset({"muon"})) for side in sides)

    found: list[ast.expr | ast.stmt] = []
    for node in nodes:
        if isinstance(node, ast.Compare) and compares_a_kind(node):
            found.append(node)
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            pairs = [*zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=True),
                     *zip(node.kwonlyargs, node.kw_defaults, strict=True)]  # fmt: skip
            found += [d for a, d in pairs if d is not None and a.arg == "optimizer" and spelt(d)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "optimizer":
            found += [node] if spelt(node.value) else []
    return found


def test_optimizer_kinds_are_compared_and_defaulted_from_wire_only(rlnb_nodes):
    """``== wire.MUON``, never ``== "muon"``, and an ``optimizer`` defaulted to ``wire.ADAM``: one spelling, in
    ``rlnb/wire``. ``rlnb/cli`` spells them on purpose (its ``--help`` imports no pydantic, which wire does; the CLI's
    tests hold its defaults to wire's)."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
        for path, nodes in rlnb_nodes.items()
        if path.relative_to(ROOT).parts[1] not in ("wire", "cli")
        for node in _spelt_kinds(nodes)
    ]
    assert not found, "optimizer kinds spelt outside rlnb/wire (use wire.ADAM / wire.MUON):\n" + "\n".join(found)


def test_the_optimizer_kind_check_sees_comparisons_and_defaults():
    """The check above finds each shape it names, and not ``adam`` the field name."""
    source = """
if self.result.optimizer == "adam" or x in ("muon", "y"): pass
def f(a, optimizer="adam", *, b=1): pass
def g(*, optimizer="muon"): pass
class C:
    optimizer: str = "adam"
if name == "adam" or "adam" != f: pass
adam = params["adam"]
def h(optimizer=wire.ADAM, other="adam"): pass
if optimizer_kind(p) in {"adam"}: pass
"""
    hits = _spelt_kinds(tuple(ast.walk(ast.parse(source))))
    assert sorted(n.lineno for n in hits) == [2, 2, 3, 4, 6, 10]


def test_rl_metric_names_are_named_from_history_figures_only(rlnb_nodes):
    """The RL metrics ``rl_step`` logs, and the eval accuracy, are named by ``history.figures.RLMetric`` and
    ``EVAL_ACCURACY``: the step that logs them and the plots and tables that show them. ``"reward"`` is left out of the
    scan: it also names a sweep's objective and a completion's column."""
    from rlnb.history.figures import EVAL_ACCURACY, RL_METRICS

    names = {m: f"history.figures.RLMetric ({m})" for m in (*RL_METRICS, EVAL_ACCURACY) if m != "reward"}
    home = ROOT / "rlnb" / "history" / "figures.py"
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for path, nodes in rlnb_nodes.items()
        if path != home
        for node in _wire_literals(nodes, names)
    ]
    assert not found, "RL metric names spelt outside history/figures.py:\n" + "\n".join(found)


def test_viz_never_imports_tasks(rlnb_nodes):
    """viz draws what a history holds, and takes the names of its figures from history: importing a plot
    (``rlnb.viz.names``) loaded the session stack through ``rlnb.tasks`` (95 rlnb modules)."""
    viz = ROOT / "rlnb" / "viz"
    found = [
        str(path.relative_to(ROOT))
        for path, nodes in rlnb_nodes.items()
        if path.is_relative_to(viz) and "tasks" in _rlnb_imports(nodes)
    ]
    assert not found, f"viz modules importing rlnb.tasks: {found}"


def test_the_literal_check_sees_what_it_must():
    """The check above finds a literal in code, in a default and in a tuple, and leaves docstrings alone."""
    source = '''"""optim-step, as prose."""
KINDS = ("optim-step", "sample")
_PPO = "LOSS_TYPE_PPO"
def f(code="INVALID_INPUT"):
    """TRAINING_OPERATION_STATUS_FAILED in a docstring is fine."""
    return code == "TRAINING_OPERATION_STATUS_FAILED"
'''
    hits = sorted(node.value for node in _wire_literals(tuple(ast.walk(ast.parse(source))), _wire_strings()))
    assert hits == ["INVALID_INPUT", "LOSS_TYPE_PPO", "TRAINING_OPERATION_STATUS_FAILED", "optim-step", "sample"]


def test_no_module_runs_far_past_300_lines():
    """The guide: no module needs more than ~300 lines to say one thing. Past 320, split it along a concept (as
    ``session.bodies`` left ``session.session``), not by squeezing lines."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "rlnb").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 320
    }
    assert not long, f"modules over 320 lines: {long}"


def test_the_widgets_and_sessions_a_test_leaves_open_are_closed_after_it_and_no_others():
    """The root conftest's wrapper around each test call: what the test opened and left open is closed (each GC pass
    walked it for the rest of the run, and each session or bare backend kept a worker thread); what was open before
    stays open."""
    import ipywidgets

    from rlnb.testing import FakeBackend

    wrapper = sys.modules["conftest"].pytest_runtest_call_closes_what_it_left_open
    fixture_session, fixture_widget = rlnb.Session(FakeBackend(), record=False), ipywidgets.IntSlider()
    call = wrapper(None)
    next(call)  # the test starts
    left_session, left_widget = rlnb.Session(FakeBackend(), record=False), ipywidgets.VBox([ipywidgets.IntSlider()])
    closed_session = rlnb.Session(FakeBackend(), record=False)
    closed_session.close()
    left_backend = FakeBackend()  # as where a session given it fails to start
    with pytest.raises(StopIteration):
        call.send(None)  # it ends
    assert left_session.closed and left_widget.comm is None and left_widget.children[0].comm is None
    assert left_backend._worker.closed
    assert not fixture_session.closed and fixture_widget.comm is not None
    fixture_session.close()
    fixture_widget.close()


def test_the_test_processes_keep_the_bytecode_they_compile_even_where_the_environment_says_not_to():
    """The root conftest: where PYTHONDONTWRITEBYTECODE was set, each worker of each run rewrote and compiled every
    test module again (half of its collection CPU: 7.2 s, 3.6 s with the bytecode kept). This module's rewritten
    bytecode is written at its import, before this test runs."""
    here = Path(__file__)
    cached = list((here.parent / "__pycache__").glob(f"{here.stem}.*-pytest-*.pyc"))
    assert not sys.dont_write_bytecode
    assert cached, f"no rewritten bytecode of {here.name} in its __pycache__"


@pytest.mark.parametrize(
    ("worker", "count", "pinned"),
    [("gw1", "2", {7}), ("gw2", "4", {3}), ("gw3", "4", {7}), ("gw0", "1", None), ("", "", None)],
)
def test_each_xdist_worker_runs_on_one_core_the_workers_taking_the_cores_in_turn(monkeypatch, worker, count, pinned):
    """The root conftest: the engine's thread policy then gives each engine worker one thread; seeing both cores, it
    timed two threads that spun while the other test process held the second (twice the CPU of an engine test)."""
    import os

    set_to = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 7})
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: set_to.append(cpus))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    sys.modules["conftest"]._one_core_per_worker()
    assert set_to == ([pinned] if pinned else [])


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_no_notebook_cell_shows_its_figure_twice(notebook):
    """A cell that draws with pyplot and then returns its figure shows it twice: once as pyplot's display, once as
    the cell's value (notebook 02's comparison did)."""
    import json

    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    for i, cell in enumerate(cells):
        images = {o["output_type"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})}
        assert images != {"execute_result", "display_data"}, f"{notebook} cell {i} shows its figure twice"


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_no_notebook_logs_the_reward_that_rl_step_logs(notebook):
    """``rl_step`` logs its step's reward to the history: a cell logging it again made two rows a step, the second
    without ``reward_std`` (notebook 06's RL loop did)."""
    import json

    for i, cell in enumerate(json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]):
        code = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
        assert not ("rl_step(" in code and re.search(r"history\.log\([^)]*reward=", code)), f"{notebook} cell {i}"


def _public_functions(node: ast.AST, in_class: bool = False):
    """(function, its count of parameters) for each public function and method in ``node`` (no leading underscore;
    not one nested in a function). ``self``/``cls`` do not count; ``*args``/``**kwargs`` do not either: they are the
    option groups' keywords (``_input.options.take``), each group checking its own fields."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            yield from _public_functions(child, in_class=True)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and not child.name.startswith("_"):
            named = [a.arg for a in child.args.posonlyargs + child.args.args]
            if in_class and named[:1] in (["self"], ["cls"]):
                named = named[1:]
            yield child, len(named) + len(child.args.kwonlyargs)


def test_no_public_function_takes_more_than_10_parameters(rlnb_nodes):
    """The guide: public functions take at most 10 parameters; past that, a group (``SampleSettings``,
    ``TrialOptions``) says which belong together."""
    many = []
    for path, nodes in rlnb_nodes.items():
        for fn, count in _public_functions(nodes[0]):  # ast.walk gives the module first
            if count > 10:
                many.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} takes {count}")
    assert not many, many


def test_the_parameter_count_counts_what_it_says():
    """The rule's own count, on a method with ``self``, keyword-only parameters and ``**options``."""
    source = (
        "class A:\n    def f(self, a, /, b, *args, c, d=1, **options): ...\n    def _g(self, *x): ...\ndef h(): ..."
    )
    assert [(fn.name, n) for fn, n in _public_functions(ast.parse(source))] == [("f", 4), ("h", 0)]


def test_a_wire_loss_type_is_named_in_one_module_outside_wire(rlnb_nodes):
    """``_CROSS_ENTROPY = LOSS_NAMES["cross_entropy"]`` was written in four modules: a loss type more than one module
    branches on is wire's own name (``wire.LOSS_CROSS_ENTROPY``)."""
    where: dict[str, list[str]] = {}
    for path, nodes in rlnb_nodes.items():
        if path.relative_to(ROOT).parts[1] == "wire":
            continue
        for node in nodes:
            if (
                isinstance(node, ast.Subscript)
                and getattr(node.value, "attr", getattr(node.value, "id", "")) == ("LOSS_NAMES")
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.ctx, ast.Load)
            ):
                where.setdefault(node.slice.value, []).append(str(path.relative_to(ROOT)))
    copies = {name: sorted(set(paths)) for name, paths in where.items() if len(set(paths)) > 1}
    assert not copies, copies
