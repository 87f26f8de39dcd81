"""A transport that loses the answer to a create request after the app acted on it, as a proxy's timeout does."""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient

RESOURCES, SESSIONS = "/v1/rl/model-resources", "/v1/rl/training-sessions"


class LoseAnswer:
    """An ``httpx.MockTransport`` handler that passes every request to the app behind ``c`` (a TestClient,
    whose own httpx is another copy), but loses the answer to the first POST to ``path`` after the app acted
    (as a proxy's timeout does): ``failure`` is raised, or returned when it is a response."""

    def __init__(self, c: TestClient, path: str, failure: Exception | httpx.Response):
        self.c, self.path, self.failure = c, path, failure
        self.posts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = self.c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
        if request.method == "POST" and request.url.path == self.path:
            self.posts += 1
            if self.posts == 1:
                if isinstance(self.failure, httpx.Response):
                    return self.failure
                raise self.failure
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def listed(c: httpx.Client, what: str) -> list[dict]:
    return c.get(what.removeprefix("/v1/rl"), params={"limit": 100}).json()["data"]
