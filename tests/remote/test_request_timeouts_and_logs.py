"""A long-poll's read deadline starts after the hold the server may take, and keeps the client's other groups (and a
read of ``None``, no limit); the DEBUG line each request writes never shows a presigned URL's signature."""

import logging

import httpx
import pytest

from rlnb import wire
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY

RUNNING = {"id": "op-1", "status": wire.OperationStatus.RUNNING.value}


def sent_timeouts(timeout: httpx.Timeout) -> dict[str, float | None]:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: seen.append(request) or httpx.Response(200, json=RUNNING))
    with APIClient(BASE, KEY, timeout=timeout, transport=transport) as client:
        client.get_operation("s", wire.OperationKind.OPTIM_STEP, "op-1", wait=7, seen=wire.OperationStatus.RUNNING)
    assert seen[-1].url.params.get("wait") is not None  # a long-poll
    return seen[-1].extensions["timeout"]


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        (
            httpx.Timeout(60.0, read=None, write=5.0, pool=3.0),
            {"connect": 60.0, "read": None, "write": 5.0, "pool": 3.0},
        ),
        (httpx.Timeout(2.0, read=30.0, write=5.0, pool=3.0), {"connect": 2.0, "read": 37.0, "write": 5.0, "pool": 3.0}),
    ],
    ids=["read=None stays no limit", "read + the hold"],
)
def test_a_long_polls_read_deadline_adds_the_hold_and_keeps_the_other_groups(timeout, expected):
    assert sent_timeouts(timeout) == expected


def test_the_debug_line_of_a_presigned_request_drops_its_signature(caplog):
    signature = "X-Amz-Signature=deadbeefcafef00d"

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/upload-url"):
            return httpx.Response(
                200, json={"payload_id": "pl-1", "upload_url": f"https://bucket.test/pl-1?{signature}"}
            )
        return httpx.Response(200)

    with (
        caplog.at_level(logging.DEBUG, logger="rlnb"),
        APIClient(BASE, KEY, transport=httpx.MockTransport(handler)) as client,
    ):
        assert client.upload_payload("s1", b"{}") == "pl-1"
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("rlnb")]
    assert any(line.startswith("PUT https://bucket.test/pl-1 -> 200") for line in lines), lines
    assert not any("deadbeef" in line for line in lines)
