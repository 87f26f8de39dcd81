"""A fake of the checkpoint download endpoint and the storage host its presigned URLs point to, for the tests of
``APIClient.download_checkpoint``."""

from collections.abc import Callable

import httpx

from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY, quick

CID = "ckpt-1"
STORAGE = "https://storage.test"
DOWNLOAD = f"/v1/rl/checkpoints/{CID}/download"


class Storage:
    """The download endpoint listing ``files`` (name -> bytes, or (name, bytes) pairs), served from ``STORAGE`` unless
    ``urls`` says where; ``answers`` overrides a file's answer (a response, or a function of the request); every
    request is kept."""

    def __init__(self, files, *, sizes: dict[str, int] | None = None, urls: dict[str, str] | None = None):
        self.listed: list[tuple[str, bytes]] = list(files.items()) if isinstance(files, dict) else files
        self.files, self.sizes, self.urls = dict(self.listed), sizes or {}, urls or {}
        self.answers: dict[str, httpx.Response | Callable[[httpx.Request], httpx.Response]] = {}
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if request.url.path == DOWNLOAD:
            data = [
                {"filename": name, "size": str(self.sizes.get(name, len(body))),
                 "url": self.urls.get(name, f"{STORAGE}/f/{len(self.seen)}-{i}?sig=secret-signature")}
                for i, (name, body) in enumerate(self.listed)
            ]  # fmt: skip
            self.names = {d["url"].split("?")[0]: d["filename"] for d in data}
            return httpx.Response(200, json={"data": data})
        name = self.names[str(request.url.copy_with(query=None))]
        answer = self.answers.get(name)
        if answer is not None:
            return answer(request) if callable(answer) else answer
        return httpx.Response(200, content=self.files[name])

    def file_gets(self) -> list[httpx.Request]:
        return [r for r in self.seen if r.url.path != DOWNLOAD]


def client(storage: Storage, base: str = BASE, **kw) -> APIClient:
    return APIClient(base, KEY, transport=httpx.MockTransport(storage), **quick(kw))
