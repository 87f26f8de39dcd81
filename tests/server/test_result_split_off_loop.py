"""``--offload-results-over``: the first GET of a large completed result splits it (its large members into a payload),
which takes seconds for a large one (an 8.9 MB sample result took 0.74-1.4 s). The split runs in a worker thread outside
the registry's lock: other clients' polls are answered meanwhile, and a second GET of the same result splitting it at
the same time serves the first split's payload (one payload per operation). Served by uvicorn on loopback."""

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from rlnb import wire
from rlnb.server import create_app
from rlnb.server.app import bind
from rlnb.server.routes import operations
from tests.support.server import CE, DEADLINE, new_session, sample_body, submit, wait

pytestmark = pytest.mark.slow  # a uvicorn server in a thread


@contextmanager
def served_app(tmp_path) -> Iterator[str]:
    """The app with ``result_offload_bytes=64`` (every sample result is split), served by uvicorn on loopback: its
    base URL."""
    sock = bind("127.0.0.1", 0)
    root = "http://{}:{}".format(*sock.getsockname()[:2])
    app = create_app(device="cpu", checkpoint_dir=tmp_path, result_offload_bytes=64, public_url=root)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"{root}/v1/rl"
    finally:
        server.should_exit = True
        thread.join(DEADLINE)
        sock.close()


def test_other_clients_are_answered_while_a_result_is_split(tmp_path, monkeypatch):
    entered, gate = threading.Event(), threading.Event()
    real, calls = operations.split, []

    def held_split(*args):
        try:
            asyncio.get_running_loop()
            calls.append("on the event loop")
        except RuntimeError:
            calls.append("in a worker thread")
        if len(calls) == 1:  # the first split waits for the test; any other runs at once
            entered.set()
            assert gate.wait(DEADLINE), "the test never let the split go"
        return real(*args)

    with served_app(tmp_path) as url, httpx.Client(base_url=url, timeout=DEADLINE) as a:
        _, sid = new_session(a)
        op = submit(a, sid, wire.OperationKind.SAMPLE, sample_body())
        monkeypatch.setattr(operations, "split", held_split)
        first: list[dict] = []
        poller = threading.Thread(target=lambda: first.append(wait(a, sid, wire.OperationKind.SAMPLE, op["id"])))
        poller.start()
        try:
            assert entered.wait(DEADLINE), "the completed sample's GET never split it"
            with httpx.Client(base_url=url, timeout=DEADLINE) as b:  # another client, while the split is held
                assert b.get(f"/training-sessions/{sid}").status_code == 200
                fb = submit(b, sid, wire.OperationKind.FORWARD_BACKWARD, CE)["id"]
                assert wait(b, sid, wire.OperationKind.FORWARD_BACKWARD, fb)["status"] == wire.OperationStatus.COMPLETED
                second = b.get(f"/training-sessions/{sid}/operations/sample/{op['id']}").json()
            assert not first, "the first GET answered before its split was let go"
        finally:
            gate.set()
            poller.join(DEADLINE)
        assert first and first[0] == second, (first, second)  # the second GET's split was kept, the first's dropped
        output = second["output"]
        assert "results" not in output and output["payload_id"].startswith("pl-"), output
        link = a.post(f"/training-sessions/{sid}/payloads/{output['payload_id']}/download-url")
        assert link.status_code == 200, link.text
        got = httpx.get(link.json()["download_url"], timeout=DEADLINE).json()
        assert len(got["results"]) == 1 and len(got["results"][0]["sequences"]) == 2, got
        assert len(calls) >= 2 and set(calls) == {"in a worker thread"}, calls
