"""Project-level checks: the public namespace, the two README commands, CI, import order."""

import ast
import re
from pathlib import Path

import yaml

import rlnb

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_complete_and_classes_live_in_rlnb():
    public = {n for n in dir(rlnb) if not n.startswith("_")}
    modules = {
        "backends",
        "batched",
        "builder",
        "catalog",
        "cli",
        "controls",
        "ensemble",
        "finder",
        "history",
        "live",
        "livefig",
        "members",
        "operation",
        "params",
        "plots",
        "presets",
        "record",
        "runstore",
        "schedule",
        "server",
        "session",
        "samples",
        "sinks",
        "steplog",
        "sweep",
        "tables",
        "tasks",
        "testing",
        "text",
        "widgets",
        "wire",
    }
    assert sorted(rlnb.__all__) == rlnb.__all__
    assert public - modules - {"annotations"} <= set(rlnb.__all__) | {"samples", "wire"}
    for name in rlnb.__all__:
        obj = getattr(rlnb, name)
        if isinstance(obj, type):
            assert obj.__module__ == "rlnb", name


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = next(c for c in commands if "pytest" in c)
    demo_cmd = next(c for c in commands if "rlnb demo" in c)
    assert test_cmd in ci.splitlines()
    assert "constraints.txt" in demo_cmd and "constraints.txt" in test_cmd


def test_torch_is_pinned_exactly_and_pyproject_keeps_a_range():
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in pins
    assert not any("+cpu" in p or p.startswith(("nvidia", "triton")) for p in pins)
    assert re.search(r'"torch>=[\d.]+,<[\d.]+"', (ROOT / "pyproject.toml").read_text())


def test_environment_yml_mirrors_the_pip_install():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["-c constraints.txt", "-e .[dev,all]"]


ORDER = [
    "wire",
    "text",
    "_exceptions",
    "_secrets",
    "_exit",
    "params",
    "schedule",
    "presets",
    "steplog",
    "runstore",
    "record",
    "tables",
    "history",
    "catalog",
    "sinks",
    "operation",
    "backends",
    "session",
    "samples",
    "tasks",
    "testing",
    "members",
    "ensemble",
    "batched",
    "server",
    "plots",
    "livefig",
    "live",
    "sweep",
    "controls",
    "finder",
    "builder",
    "widgets",
    "cli",
]


def _rlnb_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlnb"):
            parts = node.module.split(".")
            if len(parts) > 1:
                found.add(parts[1])
            else:
                found.update(a.name for a in node.names)
    return found


def test_modules_only_import_earlier_modules():
    """Data flows one way: wire → params → session → backend → history → plots (style.md)."""
    rank = {name: i for i, name in enumerate(ORDER)}
    rank["samples"] = rank["text"]  # samples only builds wire models (from tokens or text)
    for path in sorted((ROOT / "rlnb").rglob("*.py")):
        rel = path.relative_to(ROOT / "rlnb")
        me = rel.parts[0].removesuffix(".py")
        if me == "__init__":
            continue
        for dep in _rlnb_imports(path) - {me}:
            if dep in rank and me in rank:
                assert rank[dep] <= rank[me], f"{rel} imports rlnb.{dep}, which comes later"


def test_nothing_reads_the_shared_reference_folder():
    needle = "../" + "shared"
    for path in [*(ROOT / "rlnb").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        assert needle not in path.read_text(), path
