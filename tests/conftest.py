"""Shared fixtures: a real `rlnb serve` subprocess on loopback, runs under a temporary folder, Hugging Face
models. Helpers that tests import live in tests/support/."""

from collections.abc import Iterator

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


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    """Sessions record their runs under a temporary folder, not ./rlnb-runs."""
    monkeypatch.setenv("RLNB_RUNS_DIR", str(tmp_path / "rlnb-runs"))


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


@pytest.fixture(scope="session")
def trl():
    """TRL 1.16 or later (it imports transformers and every sink library it integrates with); the test is
    skipped where it is not installed (and marked slow)."""
    return pytest.importorskip("trl", minversion="1.16")
