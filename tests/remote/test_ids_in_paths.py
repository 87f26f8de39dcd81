"""An id put into a request's path (a session's, a checkpoint's, an operation's: the server's own, or typed by a
user) that is a dot segment: httpx resolves ``.`` and ``..`` in a path, so ``stop_session("..")`` was a POST to
``/v1/rl/stop`` and ``get_checkpoint("..")`` a GET of ``/v1/rl``, another endpoint than the one called."""

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY, quick


@pytest.mark.parametrize("given", [".", ".."])
def test_a_dot_segment_id_stays_one_segment_of_its_endpoints_path(given):
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404, json={"error": {"message": "no such thing", "type": "not_found"}})

    with APIClient(BASE, KEY, transport=httpx.MockTransport(server), **quick({"max_retries": 0})) as c:
        for call in (lambda: c.get_checkpoint(given), lambda: c.stop_session(given),
                     lambda: c.get_operation("sess-1", "forward-backward", given)):  # fmt: skip
            with pytest.raises(rlnb.NotFoundError):
                call()
    escaped = given.replace(".", "%2E")
    assert [r.url.raw_path.decode() for r in seen] == [
        f"/v1/rl/checkpoints/{escaped}",
        f"/v1/rl/training-sessions/{escaped}/stop",
        f"/v1/rl/training-sessions/sess-1/operations/forward-backward/{escaped}",
    ]
