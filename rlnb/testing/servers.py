"""``ServerProcess`` / ``free_port``: a server (``rlnb serve`` or any command) in a child process on 127.0.0.1, started
and stopped with deadlines, and stopped with the Python process that started it however that ends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping
from typing import IO, Any

from rlnb.lifecycle import shutdown


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A server in a child process on loopback, for notebooks, tests and benchmarks:

        with ServerProcess.rlnb_serve("--op-delay", "0.05", env={"RLNB_SERVE_TOKEN": "local-secret"}) as url:
            session = rlnb.connect(url, api_key="local-secret", base_model="rlnb/tiny")

    ``start()`` waits until ``health`` answers (or the process dies: its stderr is in the error);
    ``stop()`` terminates it, then kills it if it does not exit. The server's stdin is a pipe held by this process
    alone: ``rlnb serve`` is started with ``--exit-with-stdin``, so it stops when this process ends, however it
    ends (a SIGKILLed kernel runs no finalizer); a command of your own can watch its stdin the same way. The
    server's stderr goes to a temporary file, never to a pipe that nobody reads (a full pipe would block the server
    mid-request); ``log()`` returns what it has written so far.
    """

    def __init__(
        self,
        cmd: list[str],
        url: str,
        health: str = "/health",
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ):
        self.cmd, self.url, self.health, self.timeout = cmd, url, health, timeout
        self.env = dict(env or {})  # over this process's environment: a token there is not in the command line ps shows
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._ender: weakref.finalize[Any, Any] | None = None

    @classmethod
    def rlnb_serve(
        cls, *args: str, port: int | None = None, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> ServerProcess:
        """``rlnb serve`` with ``args`` (e.g. ``"--op-delay", "0.05"``) and ``env`` over this process's environment
        (e.g. ``{"RLNB_SERVE_TOKEN": "local-secret"}``: a token, 8 characters or more, that ``ps`` does not show) on
        ``port`` (default: a free one), given ``timeout`` seconds to answer its health check (it imports torch:
        longer on a busy machine)."""
        port = port or free_port()
        cmd = [sys.executable, "-m", "rlnb.cli", "serve", "--port", str(port), "--exit-with-stdin", *args]
        return cls(cmd, f"http://127.0.0.1:{port}", timeout=timeout, env=env)

    def start(self) -> str:
        """Start the server and wait until ``health`` answers; returns its URL. Raises RuntimeError, with
        its stderr, if it dies or misses the deadline."""
        import httpx

        if self.proc is not None:  # a second process on the same port would fail, and the first be lost
            raise RuntimeError(f"this server is already started at {self.url}: stop() it first")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server; closed by stop()
        # stdin: a pipe only this process holds, closed by the OS however it ends (see the class's docstring)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._stderr,
                                     env={**os.environ, **self.env})  # fmt: skip
        # A notebook that never reaches its stop() cell (an error before it, the cell re-run, the kernel shut down)
        # left the server running after the kernel: it is stopped when this object is collected or Python exits;
        # at exit in rlnb's workers phase (``_stop_at_exit``), after the sessions on it closed, not before them.
        self._ender = weakref.finalize(self, _end, self.proc, self._stderr)
        self._ender.atexit = False
        _STARTED.add(self._ender)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if httpx.get(self.url + self.health, timeout=1).status_code < 500:
                    return self.url
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.log()[-2000:]
                self.stop()
                raise RuntimeError(f"{' '.join(self.cmd[:4])} did not start: {err}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the server, then kill it if it has not exited within 15 s."""
        if self._ender is not None:
            self._ender()  # runs _end once
            _STARTED.discard(self._ender)
        self.proc, self._stderr, self._ender = None, None, None

    def log(self) -> str:
        """The server's stderr so far (its log and any traceback); empty once stopped."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def __enter__(self) -> str:
        """``with ServerProcess.rlnb_serve() as url:`` starts the server and gives its URL."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server (see ``stop``), whether or not the block raised."""
        self.stop()


def _end(proc: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
    """Terminate ``proc``, then kill it if it has not exited within 15 s, and close its stderr file. A function of
    its own, so that the finalizer holds no reference to the ``ServerProcess``."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdin.close()  # type: ignore[union-attr]  # a pipe: start() made it
    stderr.close()


_STARTED: set[weakref.finalize[Any, Any]] = set()
"""The enders of the servers started and not stopped by ``stop()`` (one collected has run already: a no-op)."""


def _stop_at_exit() -> None:
    """Interpreter exit: stop the servers left running. weakref's own exit hook, registered at the first finalize, ran
    before rlnb's, so the sessions on a server were closed against a dead one (a false "may still be running"). It
    also marked every finalizer shut down (a call of one is a no-op then): each is detached and its ``_end`` called."""
    for ender in list(_STARTED):
        if (held := ender.detach()) is not None:
            _end(*held[2])


shutdown.on_exit("workers", _stop_at_exit)
