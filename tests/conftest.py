"""Shared fixtures: a real `rlnb serve` subprocess on loopback."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(*args: str, tmp_dir: str | None = None) -> Iterator[str]:
    """Start `rlnb serve` on a free loopback port; yield its base URL; stop it."""
    port = free_port()
    cmd = [sys.executable, "-m", "rlnb.cli", "serve", "--port", str(port), "--device", "cpu", *args]
    if tmp_dir:
        cmd += ["--checkpoint-dir", tmp_dir]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rlnb serve did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


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

