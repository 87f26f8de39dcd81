"""Shared fixtures: a real `rlnb serve` subprocess on loopback, runs under a temporary folder, Hugging Face
models. Helpers that tests import live in tests/support/."""

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """A server without auth, shared by a test module."""
    from tests.support.server import running_server

    with running_server(tmp_dir=str(tmp_path_factory.mktemp("ckpt"))) as url:
        yield url


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory) -> Iterator[str]:
    """A server that requires the bearer token `secret-token`."""
    from tests.support.server import running_server

    with running_server("--token", "secret-token", tmp_dir=str(tmp_path_factory.mktemp("ckpt"))) as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_raises() -> None:
    """Ctrl-C raises in the tests and in the commands they start, also where pytest runs as a background job: a shell
    starts it with SIGINT ignored, which the commands it starts inherit and keep (docs/server.md), so a test that stops
    one with SIGINT waited for it to its deadline."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def _runs_root(tmp_path_factory) -> Iterator[Iterator[Path]]:
    """A fresh runs folder for each test that does not ask for ``tmp_path``, under one folder of the session."""
    root = tmp_path_factory.mktemp("runs")
    yield (root / str(n) for n in itertools.count())


@pytest.fixture(autouse=True)
def _runs_in_tmp(request, monkeypatch, _runs_root):
    """Sessions record their runs under a temporary folder, not ./rlnb-runs: the test's ``tmp_path`` where it asks
    for one, else a folder of its own under the session's. Making a ``tmp_path`` for every test scanned pytest's
    base folder, one entry more per test, each time (a millisecond a test late in a run)."""
    asks = "tmp_path" in request.fixturenames
    runs = request.getfixturevalue("tmp_path") / "rlnb-runs" if asks else next(_runs_root)
    monkeypatch.setenv("RLNB_RUNS_DIR", str(runs))


@pytest.fixture(autouse=True)
def _no_claims(monkeypatch):
    """Each test's lost creates see none of the ids earlier tests' creates got (``rlnb.remote.claims``, kept per
    process): fakes number their objects alike (mr-1, sess-2), and one claimed by an earlier test was not a match."""
    claims = sys.modules.get("rlnb.remote.claims")  # not imported here: a test of what ``import rlnb`` loads
    if claims is not None:
        monkeypatch.setattr(claims.CLAIMS, "_ids", set())


@pytest.fixture(scope="session")
def hf_dirs(transformers, tmp_path_factory) -> dict[str, str]:
    """Tiny GPT-2, Llama and Qwen3 models with a trained BPE tokenizer, each saved to its own folder."""
    from tests.support import hf_models

    root = tmp_path_factory.mktemp("hf")
    return {arch: str(hf_models.save(arch, root / arch)) for arch in ("gpt2", "llama", "qwen3")}


@pytest.fixture(scope="session")
def transformers():
    """The transformers module; the test is skipped where it is not installed (and marked slow)."""
    return pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def peft():
    """The peft module (about six seconds to import); the test is skipped where it is not installed (and
    marked slow)."""
    return pytest.importorskip("peft")


@pytest.fixture(scope="session", autouse=True)
def sink_env(tmp_path_factory) -> Iterator[dict[str, str]]:
    """Where the sink libraries keep their state, set for the whole test session: Trackio reads TRACKIO_DIR
    once, when it is first imported, by whichever test or library imports it first (TRL and transformers do,
    lazily, W&B and MLflow too). Telemetry is off."""
    root = tmp_path_factory.mktemp("sink-state")
    folders = ("TRACKIO_DIR", "WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR")
    variables = {
        **{name: str(root / name.lower()) for name in folders},
        "WANDB_SILENT": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in variables.items():
            mp.setenv(name, value)
        yield variables


@pytest.fixture(scope="session")
def trl():
    """TRL 1.16 or later; the test is skipped where it is not installed (and marked slow)."""
    return pytest.importorskip("trl", minversion="1.16")


@pytest.fixture
def undrawn_live_view(monkeypatch):
    """A panel's live view keeps every line, title, legend and table as it would, but skips Agg's raster and the
    PNG (``livefig.Panel.render``), most of what a RunPanel costs (it draws its empty view as it starts): for tests
    that read the form, the status line and the session, never a picture (tests/viz checks the pictures)."""
    from rlnb.viz.livefig import Panel

    monkeypatch.setattr(Panel, "render", lambda self: b"")


@pytest.fixture
def unplotted_schedule(monkeypatch):
    """An optimizer builder's schedule plot is left empty: the rates it would plot are still computed, at the steps it
    would plot them (``describe.plot_steps``), but no figure is made or drawn (about 0.03 s of CPU each, a hundred in
    the fast tier). For tests that read a builder's form, summary, params and preview, never ``schedule_plot``
    (``tests/widgets/test_schedule_plot.py`` and the tests that read it check the plot)."""
    from rlnb.widgets import builder, describe

    def unplotted(schedule, base_lr: float) -> bytes:
        for step in describe.plot_steps(schedule):
            schedule(step, base_lr)
        return b""

    monkeypatch.setattr(builder, "schedule_png", unplotted)
