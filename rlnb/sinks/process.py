"""A sink's library in a child process, for libraries whose writes cost real CPU in Python.

MLflow's SQLite store spends ~60-80 µs of Python per metric (SQLAlchemy objects), which on a
thread of the training process takes the GIL from training; in a child process it takes none.
The child is a fresh ``python`` running ``main()`` here (never ``multiprocessing``: spawning would
re-run a user's script), started for a sink's first run and stopped after its last. It makes the
sink again from ``Sink.spec()`` and writes what it is sent; messages are length-prefixed pickles
over its stdin/stdout (its own prints go to stderr). Every reply is awaited on the sink's thread,
so an error in the child raises there and drops the sink. If the parent dies, the child sees its
stdin close, finishes the runs it holds and exits; at the parent's exit, a child still busy after
the flush deadline is killed. The registry of children is only held to find or start a process, never
while one is answering: a child whose set-up never returns (a tracking server that accepts and never
answers) holds its own sink's thread, not the exit.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from rlnb.sinks import leases
from rlnb.sinks.base import Failure, Point, RunInfo, Sink, Writer

_HEADER = struct.Struct("<I")
_START = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); from rlnb.sinks.process import main; main()"
"""The child's program. It ignores SIGINT, first: Jupyter's "Interrupt kernel" and a terminal's Ctrl-C signal the
parent's whole process group, and the child died with its pending points (the sink dropped for the rest of the
session). Its stdin closing, or ``Child.end``'s SIGTERM, ends it."""


def _send(pipe: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_HEADER.pack(len(data)) + data)
    pipe.flush()


def _receive(pipe: IO[bytes]) -> Any:
    """One message, or ``EOFError`` where the pipe ends, also in the middle of one (its writer killed while it
    writes: a truncated pickle would end the reader with its runs open)."""
    head = pipe.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the sink's child process ended")
    size = _HEADER.unpack(head)[0]
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError(f"the pipe ended {len(data)} bytes into a message of {size}")
    return pickle.loads(data)


class Child:
    """The parent's handle on one child process, shared by every run of one sink. Starting it only
    launches the process; ``start()`` makes the sink there (slow: imports, a store's set-up)."""

    def __init__(self, sink: Sink):
        root = str(Path(__file__).resolve().parents[2])  # the rlnb this process runs, for the child too
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        proc = subprocess.Popen(
            [sys.executable, "-c", _START],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        if proc.stdin is None or proc.stdout is None:  # pragma: no cover - PIPE always gives both
            raise RuntimeError("no pipes to the sink's child process")
        self._proc, self._requests, self._replies = proc, proc.stdin, proc.stdout
        self._lock = threading.Lock()
        self._spec = sink.spec()
        self._note = sink.note  # the child's sink's warnings (a name Trackio renamed), said by this one
        self._made = False
        self.runs = 0

    def start(self) -> None:
        """Make the sink in the child, once (later callers wait for the first, on their own threads)."""
        with self._lock:
            if not self._made:
                self._exchange(("sink", *self._spec))
                self._made = True

    def call(self, *message: Any) -> Any:
        """Send one request and wait for its answer; an error in the child is raised here."""
        with self._lock:
            return self._exchange(message)

    def _exchange(self, message: tuple[Any, ...]) -> Any:
        try:
            _send(self._requests, message)
            status, value, notes = _receive(self._replies)
        except (OSError, EOFError, ValueError) as exc:  # ValueError: the pipe was closed by stop()
            raise RuntimeError(f"the sink's child process ended ({_how_it_ended(self._proc)})") from exc
        for text in notes:
            self._note(text)
        if status == "error":
            raise RuntimeError(value)
        return value

    def stop(self, timeout: float = 10.0) -> None:
        """Close its stdin (it finishes and exits) once no request is in flight; kill it if that has not
        happened within ``timeout`` s (a request still waiting for its answer then ends with an error)."""
        end = time.monotonic() + timeout
        if self._lock.acquire(timeout=timeout):
            try:
                with contextlib.suppress(OSError):
                    self._requests.close()
            finally:
                self._lock.release()
        try:
            self._proc.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with contextlib.suppress(OSError):
            self._replies.close()

    def end(self, grace: float = 2.0) -> None:
        """Terminate it now, and kill it if it is still there after ``grace`` s: a run given up on (a library that
        never answers) kept it until interpreter exit. A request waiting for its answer ends with an error."""
        self._proc.terminate()
        try:
            self._proc.wait(grace)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for pipe in (self._requests, self._replies):  # a reader waiting on it has its end of file by now
            with contextlib.suppress(OSError, ValueError):
                pipe.close()


def _how_it_ended(proc: subprocess.Popen[bytes]) -> str:
    """How a child whose pipe ended ended: its exit code, or the signal that killed it (a ``kill -9``, the OOM killer:
    a negative code). Its pipe closes a moment before it can be reaped, so it is waited for, 1 s at most."""
    try:
        code = proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return "it still runs: its pipe was closed"
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


_children: dict[int, Child] = {}
_children_lock = threading.Lock()


def place(sink: Sink) -> str | None:
    """Where ``sink`` writes (``Sink.where``; a folder as an absolute path), or None for a sink that cannot say."""
    try:
        name, kwargs = sink.spec()[1], sink.where()
    except NotImplementedError:
        return None
    kwargs = {k: os.path.abspath(v) if k in ("logdir", "dir") and isinstance(v, str) else v for k, v in kwargs.items()}
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


class Lease:
    """A run's hold on its sink's library, taken as soon as the run starts, so that slow set-up
    (importing the library, starting the child, creating a store's tables) overlaps training."""

    def __init__(self, sink: Sink):
        """Take the hold (starting the sink's child process if it has none); ``ready()`` then does the set-up."""
        self.sink = sink
        self._child: Child | None = None
        self._claim: leases.Claim | None = None
        if not sink.process:
            return
        with _children_lock:  # one child per sink, started for its first run, stopped after its last
            child = _children.get(id(sink))
            if child is None:
                child = _children[id(sink)] = Child(sink)
            child.runs += 1
            self._child = child

    def ready(self) -> None:
        """The slow set-up, outside the registry's lock (it may never return); ``release()`` after it, in any case."""
        child = self._child
        if child is not None:
            child.start()
        elif not self.sink.process:
            self.sink.prepare()

    def open(self, run: RunInfo) -> Writer:
        return self.sink.open(run) if self._child is None else ChildWriter(self._child, run)

    def holds(self, run: RunInfo) -> str | None:
        """``Sink.holds``, asked where the sink's library runs."""
        return self.sink.holds(run) if self._child is None else self._child.call("holds", run)

    def claim(self, run: RunInfo) -> bool:
        """Take ``run``'s name at the sink's place until ``release`` (``rlnb.sinks.leases``); False if another run
        of that name is being written there now, by this process or another on this machine."""
        where = place(self.sink)
        if where is None:
            return True
        self._claim = leases.take(where, run.name, leases.owner(run))
        return self._claim is not None

    def _unclaim(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            leases.drop(claim)

    def release(self) -> None:
        self._unclaim()
        child, self._child = self._child, None
        if child is None:
            return
        with _children_lock:
            child.runs -= 1
            if child.runs > 0:
                return
            _children.pop(id(self.sink), None)
        child.stop()

    def abandon(self) -> bool:
        """Give up on this run: the sink's child process is ended (``Child.end``) unless another run still uses it.
        Whether it was ended."""
        self._unclaim()
        with _children_lock:
            child, self._child = self._child, None
            if child is None:
                return False
            child.runs -= 1
            if child.runs > 0:
                return False
            _children.pop(id(self.sink), None)
        child.end()
        return True


def stop_all(timeout: float = 2.0) -> None:
    """At interpreter exit, after the flush: stop the children whose runs never finished, killing any
    still busy after ``timeout`` seconds."""
    with _children_lock:
        children = list(_children.values())
        _children.clear()
    for child in children:
        child.stop(timeout)


class ChildWriter:
    """A run written by the child: the ``Writer`` the sink's thread sees."""

    def __init__(self, child: Child, run: RunInfo):
        self._child = child
        self._key: int = child.call("open", run)

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        self._child.call("write", self._key, points, failures)

    def close(self) -> None:
        self._child.call("close", self._key)


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The child's loop: one sink, any number of runs, until stdin closes."""
    sink: Sink | None = None
    writers: dict[int, Any] = {}
    while True:
        try:
            op, *args = _receive(requests)
        except EOFError:
            break
        try:
            if op == "sink":
                module, name, kwargs = args
                sink = getattr(importlib.import_module(module), name)(**kwargs, process=False)
                if sink.error is not None:
                    raise sink.error
                sink.prepare()
                value: Any = None
            elif op == "holds" and sink is not None:
                value = sink.holds(args[0])
            elif op == "open" and sink is not None:
                value = len(writers)
                writers[value] = sink.open(args[0])
            elif op == "write":
                writers[args[0]].write(args[1], args[2])
                value = None
            elif op == "close":
                writers.pop(args[0]).close()
                value = None
            else:
                raise ValueError(f"unknown request {op!r}")
            reply = ("ok", value, sink.unsaid() if sink is not None else [])
        except Exception as exc:  # noqa: BLE001 - every error goes back to the parent
            reply = ("error", f"{type(exc).__name__}: {exc}", sink.unsaid() if sink is not None else [])
        try:
            _send(replies, reply)
        except OSError:  # the parent was killed mid-request (a closed pipe): as when its stdin closes
            break
    for writer in writers.values():  # the parent went away: finish what is open
        try:
            writer.close()
        except Exception:  # noqa: BLE001
            continue


def main() -> None:
    """The child's entry point (``python -c _START``)."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # libraries' prints must not reach the message pipe
    serve(sys.stdin.buffer, replies)
