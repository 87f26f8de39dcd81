"""Notebook 04's first cell picks its target: Together with ``TOGETHER_API_KEY`` and ``RLNB_BASE_MODEL``, else a local
``rlnb serve``. With the key alone it fell back to the local server saying only "local rlnb serve" (review42c L4):
one who exported the key expected Together. Cell 1 is run as saved, its server stubbed (nothing is started)."""

import json
from pathlib import Path

import pytest

from rlnb.testing import ServerProcess

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "04-remote.ipynb"


class NoServer:
    def start(self):
        return "http://127.0.0.1:1"


def run_first_cell(monkeypatch, capsys, env):
    for name in ("TOGETHER_API_KEY", "RLNB_BASE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ServerProcess, "rlnb_serve", staticmethod(lambda *args: NoServer()))
    cell = next(c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code")
    space: dict = {}
    exec("".join(cell["source"]), space)
    return capsys.readouterr().out, space


@pytest.mark.parametrize(
    ("env", "said", "target"),
    [
        ({}, "local rlnb serve\n", "http://127.0.0.1:1"),
        (
            {"TOGETHER_API_KEY": "tgp_not_a_real_key"},
            "local rlnb serve: TOGETHER_API_KEY is set but RLNB_BASE_MODEL is not (set it to a Together base model "
            "to use Together)\n",
            "http://127.0.0.1:1",
        ),
        ({"TOGETHER_API_KEY": "tgp_not_a_real_key", "RLNB_BASE_MODEL": "some/model"}, "Together\n", None),
    ],
)
def test_notebook_04_says_which_target_it_uses_and_why(monkeypatch, capsys, env, said, target):
    out, space = run_first_cell(monkeypatch, capsys, env)
    assert out == said and "tgp_not_a_real_key" not in out  # the key is never printed
    assert space["target"] == (target or "https://api.together.ai")
