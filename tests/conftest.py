"""Shared fixtures: a real `rlnb serve` subprocess on loopback."""

from collections.abc import Iterator

import pytest

from rlnb.testing import ServerProcess


def running_server(*args: str, tmp_dir: str | None = None) -> ServerProcess:
    """`rlnb serve` on a free loopback port (CPU), as a context manager yielding its base URL."""
    return ServerProcess.rlnb_serve("--device", "cpu", *args, *(["--checkpoint-dir", tmp_dir] if tmp_dir else []))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """A server without auth, shared by a test module."""
    with running_server(tmp_dir=str(tmp_path_factory.mktemp("ckpt"))) as url:
        yield url


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory) -> Iterator[str]:
    """A server that requires the bearer token `secret-token`."""
    with running_server("--token", "secret-token", tmp_dir=str(tmp_path_factory.mktemp("ckpt"))) as url:
        yield url


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    """Sessions record their runs under a temporary folder, not ./rlnb-runs."""
    monkeypatch.setenv("RLNB_RUNS_DIR", str(tmp_path / "rlnb-runs"))
