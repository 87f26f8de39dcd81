"""Shared fixtures and helpers: a real `rlnb serve` subprocess on loopback, an in-process app, API calls."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from rlnb import wire
from rlnb.server import create_app
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


def app_client(tmp_path: Path, **settings: Any) -> TestClient:
    """An in-process `rlnb serve` (CPU, checkpoints under tmp_path) whose relative requests go to /v1/rl/...;
    use it as a context manager (that runs the app's lifespan)."""
    app = create_app(device="cpu", checkpoint_dir=tmp_path, **settings)
    return TestClient(app, base_url="http://testserver/v1/rl")


def new_session(c: httpx.Client, **resource) -> tuple[str, str]:
    resource.setdefault("base_model", "rlnb/tiny")
    r = c.post("/model-resources", json=resource)
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    s = c.post("/training-sessions", json={"model_resources_id": rid})
    assert s.status_code == 200, s.text
    return rid, s.json()["id"]


def submit(c: httpx.Client, sid: str, kind: str, body: dict | None = None, key: str | None = None) -> dict:
    r = c.post(
        f"/training-sessions/{sid}/operations/{kind}",
        json=body or {},
        headers={"Idempotency-Key": key or str(uuid.uuid4())},
    )
    assert r.status_code == 200, r.text
    return r.json()


def wait(c: httpx.Client, sid: str, kind: str, op_id: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        env = c.get(f"/training-sessions/{sid}/operations/{kind}/{op_id}").json()
        if env["status"] in wire.TERMINAL_STATUSES:
            return env
        time.sleep(0.01)
    raise AssertionError(f"{kind} {op_id} did not finish")


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory) -> dict[str, str]:
    """Tiny GPT-2, Llama and Qwen3 models with a trained BPE tokenizer, each saved to its own folder."""
    pytest.importorskip("transformers")
    from tests.support import hf_models

    root = tmp_path_factory.mktemp("hf")
    return {arch: str(hf_models.save(arch, root / arch)) for arch in ("gpt2", "llama", "qwen3")}
