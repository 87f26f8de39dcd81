"""Small hostile HTTP servers on 127.0.0.1 for client tests: each serves at most ``max_connections``
connections on its own thread, one request per connection, and ``stop()`` (or leaving the ``with``)
closes it, so a test never leaves anything running."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable

import httpx

Answer = Callable[[socket.socket, httpx.Request, threading.Event], None]
"""Writes the raw answer to the connection; should return soon after the event is set."""


def read_request(conn: socket.socket) -> httpx.Request:
    """One HTTP/1.1 request (headers and a Content-Length body) as an httpx.Request."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("client went away")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
    length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    host = next(v for k, v in headers if k.lower() == "host")
    return httpx.Request(method, f"http://{host}{target}", headers=headers, content=body)


def write_response(conn: socket.socket, response: httpx.Response) -> None:
    body = response.read()
    head = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
    head += [f"{k}: {v}" for k, v in response.headers.items() if k.lower() not in ("content-length", "connection")]
    head += [f"Content-Length: {len(body)}", "Connection: close"]
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


class Loopback:
    def __init__(self, answer: Answer, max_connections: int = 200):
        self.answer, self.max_connections = answer, max_connections
        self.stopping = threading.Event()
        self.served = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._workers: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, name="hostile-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set() and self.served < self.max_connections:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.served += 1
            worker = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            worker.start()
            self._workers.append(worker)

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client gave up, or the test stopped us
            self.answer(conn, read_request(conn), self.stopping)

    def stop(self) -> None:
        """Refuse new connections (the port is closed) and end the ones being served."""
        self.stopping.set()
        self._thread.join(5)
        self._sock.close()
        for worker in self._workers:
            worker.join(5)

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bridge(handler: Callable[[httpx.Request], httpx.Response]) -> Answer:
    """Serve an httpx-style handler (e.g. the FakeAPI of test_remote_client) over a real socket."""

    def answer(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
        write_response(conn, handler(request))

    return answer


def dripping(every: float, *, headers_first: bool) -> Answer:
    """Answer one byte every ``every`` seconds: the whole answer (``headers_first=False``), or proper
    headers at once and then a body that never ends (``Content-Length`` of 1 MB)."""

    def answer(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
        body = b'{"data": []}' + b" " * 1_000_000
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        if headers_first:
            conn.sendall(head)
            data = body
        else:
            data = head + body
        for i in range(len(data)):
            if stopping.wait(every):
                return
            conn.sendall(data[i : i + 1])

    return answer


def everything_in(exc: BaseException) -> str:
    """Every text an exception carries: its chain, its attributes, the requests and responses inside."""
    texts, seen = [], set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        texts += [str(e), repr(e), json.dumps(getattr(e, "body", None), default=str)]
        texts += [repr(v) for v in vars(e).values()]
        for attr in ("request", "response"):
            try:
                obj = getattr(e, attr, None)
            except RuntimeError:  # httpx raises when a request was never set
                obj = None
            if obj is not None:
                texts += [repr(obj), str(dict(obj.headers)), repr(getattr(obj, "content", b""))]
        stack += [c for c in (e.__cause__, e.__context__) if c is not None]
    return "\n".join(texts)
