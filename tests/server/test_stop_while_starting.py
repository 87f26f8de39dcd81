"""A stop (Ctrl-C, SIGTERM) that reaches ``rlnb serve`` while uvicorn starts its event loop, after the server said
where it listens: raised at whatever line ran then, the ``KeyboardInterrupt`` (SIGTERM's ``SystemExit``) could land
in uvloop's set-up of its signal pipe, which left the loop marked running; closing it raised ``RuntimeError: Cannot
close a running event loop``, a traceback and exit status 1 where a Ctrl-C is 130. Under load it is likely: a Ctrl-C
that comes during uvicorn's import is held until the last import returns, then redelivered within ``POLL_S`` (10 ms);
the loop's signal pipe is made about 0.45 ms after that import, in 0.04 ms (the likely cause of the exit status 1 that
``tests/test_cli_hangup.py``'s Ctrl-C test saw once in CI). Here the signal arrives at that moment, every time."""

import signal
import socket
import sys

import pytest
import uvicorn

from rlnb.cli.interrupts import HeldDuringImports
from rlnb.server.app import bind, create_app, run

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _exit_as_rlnb_serve(*_: object) -> None:
    sys.exit(0)  # SIGTERM's handler in rlnb serve (rlnb/cli/serve.py)


@pytest.mark.parametrize(
    ("sig", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SystemExit)], ids=["SIGINT", "SIGTERM"]
)
def test_a_stop_while_the_event_loop_sets_up_its_signals_stops_the_server_cleanly(monkeypatch, sig, raised):
    started = []
    choose_loop = uvicorn.Config.get_loop_factory
    make_nonblocking = socket.socket.setblocking

    def chosen(config: uvicorn.Config):  # the last thing uvicorn does before its event loop starts
        started.append(False)
        return choose_loop(config)

    def setblocking(sock: socket.socket, flag: bool) -> None:  # the loop's signal pipe (uvloop: inside its set-up)
        if started == [False]:
            started[0] = True
            signal.raise_signal(sig)  # its Python handler runs at this function's next line
        make_nonblocking(sock, flag)

    monkeypatch.setattr(uvicorn.Config, "get_loop_factory", chosen)
    monkeypatch.setattr(socket.socket, "setblocking", setblocking)
    before = signal.signal(signal.SIGTERM, _exit_as_rlnb_serve)
    sock = bind("127.0.0.1", 0)
    try:
        # SIGINT's handler as rlnb's command line has it (Python's own would make asyncio's runner put in its own)
        with pytest.raises(raised), HeldDuringImports():  # as a stop once it listens: re-raised after its shutdown
            run(create_app(), sock)
        assert signal.getsignal(signal.SIGTERM) is _exit_as_rlnb_serve
    finally:
        signal.signal(signal.SIGTERM, before)
        sock.close()
    assert started == [True]  # the signal came where it was meant to
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_third_stop_while_uvicorn_starts_is_raised_at_once():
    """review38d F5: noted swallowed every Ctrl-C until uvicorn's handlers were in, so a start that hangs (an import,
    its loop's set-up) could not be broken; as in an import (``HeldDuringImports``), the third is raised at once."""
    from rlnb.server import stopping

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    reached = []
    try:
        with pytest.raises(KeyboardInterrupt), stopping.noted(False):
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            reached.append(2)  # two are noted, for uvicorn's handler
            signal.raise_signal(signal.SIGINT)
            reached.append(3)
        assert reached == [2], reached
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
