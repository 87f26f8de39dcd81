"""Helpers for server tests: `rlnb serve` in a child process, the app in-process, API calls, a settable clock."""

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from rlnb import samples, wire
from rlnb.server import create_app
from rlnb.testing import ServerProcess

DEADLINE = 120.0
"""Seconds an operation may take to finish: a tiny model's step takes milliseconds, but the machine may be
shared with other work."""


CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"keep me"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()
"""A cross-entropy forward-backward's body, as JSON."""
START_DEADLINE = 300.0
"""Seconds a server process may take to answer its health check: it imports torch, slowly on a loaded machine."""


def running_server(*args: str, tmp_dir: str | None = None) -> ServerProcess:
    """`rlnb serve` on a free loopback port (CPU), as a context manager yielding its base URL."""
    extra = ["--checkpoint-dir", tmp_dir] if tmp_dir else []
    return ServerProcess.rlnb_serve("--device", "cpu", *args, *extra, timeout=START_DEADLINE)


def app_client(tmp_path: Path, **settings: Any) -> TestClient:
    """An in-process `rlnb serve` (CPU, checkpoints under tmp_path) whose relative requests go to /v1/rl/...;
    use it as a context manager (that runs the app's lifespan)."""
    app = create_app(device="cpu", checkpoint_dir=tmp_path, **settings)
    return TestClient(app, base_url="http://testserver/v1/rl")


@contextmanager
def held(monkeypatch: pytest.MonkeyPatch, kind: wire.OperationKind) -> Iterator[threading.Event]:
    """The in-process app's operations of ``kind`` wait, running, until the yielded event is set (at the latest as the
    block ends; a ``DEADLINE`` at most): they count against ``max_pending_operations`` until the test lets them go,
    however slowly its requests arrive."""
    from rlnb.engine import handlers  # torch: imported by the tests that hold an operation only

    gate, run = threading.Event(), handlers.HANDLERS[kind]

    def waits(engine: Any, body: Any, cancelled: threading.Event) -> Any:
        assert gate.wait(DEADLINE), f"the test never let the {kind} go"
        return run(engine, body, cancelled)

    monkeypatch.setitem(handlers.HANDLERS, kind, waits)
    try:
        yield gate
    finally:
        gate.set()


def new_session(c: httpx.Client, **resource) -> tuple[str, str]:
    resource.setdefault("base_model", "rlnb/tiny")
    r = c.post("/model-resources", json=resource)
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    s = c.post("/training-sessions", json={"model_resources_id": rid})
    assert s.status_code == 200, s.text
    return rid, running(c, s.json()["id"])["id"]


def running(c: httpx.Client, sid: str) -> dict:
    """The session once it left CREATING (its model is built on a thread), as the SDK polls for RUNNING."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        s = c.get(f"/training-sessions/{sid}").json()
        if s["status"] != wire.SessionStatus.CREATING:
            return s
        time.sleep(0.01)
    raise AssertionError(f"session {sid} still CREATING after {DEADLINE} s")


def submit(c: httpx.Client, sid: str, kind: str, body: dict | None = None, key: str | None = None) -> dict:
    r = c.post(
        f"/training-sessions/{sid}/operations/{kind}",
        json=body or {},
        headers={"Idempotency-Key": key or str(uuid.uuid4())},
    )
    assert r.status_code == 200, r.text
    return r.json()


def wait(c: httpx.Client, sid: str, kind: str, op_id: str) -> dict:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        env = c.get(f"/training-sessions/{sid}/operations/{kind}/{op_id}").json()
        if env["status"] in wire.TERMINAL_STATUSES:
            return env
        time.sleep(0.01)
    raise AssertionError(f"{kind} {op_id} did not finish within {DEADLINE} s")


class Clock:
    """A settable stand-in for time.time (the server's inactivity clock)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def sample_body() -> dict:
    """A sample request's body, as JSON: two completions of 3 tokens of one short prompt."""
    inputs = [wire.ModelInput.from_tokens(list(b"n=")).to_json_dict()]
    return {"model_inputs": inputs, "num_samples": 2, "sampling_params": {"max_tokens": 3}}


def get_operation(c: httpx.Client, sid: str, kind: str, op_id: str) -> httpx.Response:
    """The operation's envelope, as the SDK polls it."""
    return c.get(f"/training-sessions/{sid}/operations/{kind}/{op_id}")


class Counter:
    """An ``httpx.MockTransport`` handler passing each request to the app behind ``c``, recording (method, path)."""

    def __init__(self, c: TestClient) -> None:
        self.c = c
        self.sent: list[tuple[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = self.c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
        self.sent.append((request.method, request.url.path))
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)
