"""A client that disconnects before its request's body arrived in full (a notebook interrupted mid-upload, a killed
script): Starlette's ``ClientDisconnect`` escaped the app, and uvicorn logged each one as a server bug, "Exception in
ASGI application" and a 60-line traceback. It is answered (to nobody) and the server goes on, saying nothing."""

import asyncio
import json
from typing import Any

import pytest
from fastapi import FastAPI

from tests.support.server import app_client, new_session


def half_sent_then_gone(app: FastAPI, method: str, path: str, query: str = "") -> list[dict[str, Any]]:
    """Call the app as uvicorn does with a request that declares 100,000 body bytes, sends 10 and disconnects; what the
    app sent back. An exception raised out of the app is what uvicorn logged as a bug."""
    messages: list[dict[str, Any]] = [{"type": "http.request", "body": b"{" * 10, "more_body": True}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", b"100000"), (b"idempotency-key", b"k")]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": query.encode(), "headers": headers,
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "root_path": "", "app": app,
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return sent


@pytest.mark.parametrize("route", ["resource", "operation", "upload"])
def test_a_client_gone_mid_body_is_no_server_error(tmp_path, route):
    with app_client(tmp_path) as c:
        if route == "resource":
            sent = half_sent_then_gone(c.app, "POST", "/v1/rl/model-resources")
        else:
            _, sid = new_session(c)
            if route == "operation":
                sent = half_sent_then_gone(c.app, "POST", f"/v1/rl/training-sessions/{sid}/operations/forward-backward")
            else:
                upload = c.post(f"/training-sessions/{sid}/payloads/upload-url").json()
                path, query = upload["upload_url"].removeprefix("http://127.0.0.1:8000").split("?")
                sent = half_sent_then_gone(c.app, "PUT", path, query)
                assert c.put(upload["upload_url"], content=b"{}").status_code == 200  # what it held was let go
        start = next(m for m in sent if m["type"] == "http.response.start")
        assert start["status"] == 400 and (b"connection", b"close") in start["headers"]
        body = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
        assert "disconnected" in body["error"]["message"]
        assert c.get("/supported-models").status_code == 200
