"""``rlnb serve``: the Together RL API served over HTTP by the in-process torch backend.

Its options and the server's start and stop live here, apart from the demo's, so a change to serving touches one
module; its options' checks and the models it serves are ``serve_checks``'s. The server (uvicorn, torch) is imported
when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import threading
from typing import Any

from rlnb.cli.interrupts import ignored
from rlnb.cli.options import (
    device_argument,
    dtype_argument,
    exit_with_stdin_argument,
    integer,
    number,
    threads_argument,
    threads_said,
)
from rlnb.cli.output import StdoutFailed, quiet, say, show
from rlnb.cli.parent import exit_with_stdin
from rlnb.cli.reader_gone import ReaderWatch
from rlnb.cli.serve_checks import TOKEN_ENV, as_option, checked


def arguments(p: argparse.ArgumentParser) -> None:
    """``rlnb serve``'s options, on its subcommand's parser."""
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, this machine only)")
    p.add_argument("--port", default="8000", help="1-65535, or 0 for any free port, announced (default: %(default)s)")
    p.add_argument("--token", default=None, help="require this bearer token, 8 characters or more, no whitespace or "
                   f"control characters (default: ${TOKEN_ENV}, else no auth; "
                   "the variable, unlike the flag, is not shown to other users by ps)")  # fmt: skip
    device_argument(p)
    p.add_argument(
        "--op-delay",
        type=number,
        default=0.0,
        help="simulated compute seconds per operation, 0-86400 (default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        help="where checkpoints go (default: a temporary folder, removed at the stop unless --state-dir is given)",
    )
    p.add_argument(
        "--fail-rate",
        type=number,
        default=0.0,
        help="fault injection: fraction of answers lost, in [0, 1) (default: %(default)s)",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH_OR_ID",
        help="serve a Hugging Face model (folder or cached hub id) as base_model NAME; repeatable",
    )
    dtype_argument(p)
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the Python code a --model folder ships (auto_map in its config: a custom architecture); only for "
        "folders you trust: it runs with the server's rights (default: such a folder is refused)",
    )
    threads_argument(p, "each session's, so that a seeded remote run repeats bit for bit")
    p.add_argument(
        "--offload-results-over",
        type=integer,
        default=None,
        metavar="BYTES",
        help="send results larger than this, 0 or more, through the payload side channel, as the service may "
        "(default: never)",
    )
    p.add_argument(
        "--state-dir", default=None, help="keep the registry here: it survives a restart (default: in memory)"
    )
    p.add_argument("--public-url", default=None, help="the address presigned URLs use (default: host:port)")
    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change a limit, e.g. max_body_bytes=1e8; the names and ranges: docs/server.md#limits (a name or value "
        "out of range is refused, naming them); repeatable",
    )
    exit_with_stdin_argument(p)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``rlnb serve``: its options checked (exit 2 with one line), then the server until it is stopped. A stop
    while it starts (torch's import, a model's load: seconds) is as one while it listens, not a ``KeyboardInterrupt``
    traceback at Ctrl-C, nor, at SIGTERM, a kill before its checkpoints' temporary folder is removed.
    A hang-up (the terminal closed) is a SIGTERM: its default action would kill the server, leaving that folder; under
    ``nohup`` (SIGHUP ignored) a hang-up stays ignored, as a Ctrl-C does in a background job (``ignored``)."""
    # uvicorn re-raises SIGTERM once it has shut down: exit through the finally blocks, not by the default handler
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    hangup = getattr(signal, "SIGHUP", None)  # POSIX only
    hangup = None if hangup is None or ignored(hangup) else hangup
    before = signal.signal(hangup, _as_sigterm) if hangup is not None else None
    exit_with_stdin(args.exit_with_stdin)  # after the handler: a parent gone at once is a SIGTERM's clean stop
    try:
        return _run(args)
    except KeyboardInterrupt:  # once it listens, _serve_app says it stopped
        say("rlnb serve: stopped (Ctrl-C) before it listened")
        return 130
    except BrokenPipeError:  # `rlnb serve | head -1`: a traceback from the announcement, exit status 1
        quiet(sys.stdout)
        say("rlnb serve: stopped, its output was closed")
        return 141  # 128 + SIGPIPE, as a shell reports a process its pipe ended
    finally:  # an in-process caller (a test) keeps its own
        signal.signal(signal.SIGTERM, previous)
        if hangup is not None:
            signal.signal(hangup, before)


def _as_sigterm(*_: object) -> None:
    """SIGHUP's handler: the stop SIGTERM makes, by whichever handler SIGTERM has now (uvicorn's while it listens:
    requests in flight are finished, operations stopped or abandoned)."""
    os.kill(os.getpid(), signal.SIGTERM)


def _run(args: argparse.Namespace) -> int:
    from rlnb._files import release
    from rlnb.engine.held import scratch_folder

    try:
        limits, models = checked(args)
    except (ValueError, ImportError) as exc:
        print(f"rlnb serve: {exc}", file=sys.stderr)
        return 2
    extra = {"state_dir": args.state_dir, "threads": args.threads}
    extra |= {"public_url": args.public_url} if args.public_url else {}
    scratch, lock = None, None  # no --checkpoint-dir or --state-dir: checkpoints live as long as the server
    if args.checkpoint_dir is None and args.state_dir is None:  # a killed server's are removed by the next one
        scratch_path, lock = scratch_folder()
        scratch = str(scratch_path)
    try:
        code, abandoned = _serve_app(args, models, scratch, extra, limits)
    finally:
        if scratch is not None:
            _remove_scratch(scratch)
            release(lock)
    if abandoned:  # their torch work still runs on worker threads: interpreter exit would wait for it
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):  # a closed pipe: os._exit all the same
                stream.flush()
        os._exit(code)
    return code


def _remove_scratch(scratch: str) -> None:
    """Remove the checkpoints' temporary folder at the stop. A failure is said on stderr, naming the folder and
    what could not be removed (so that no checkpoint stays in the temporary folder unsaid), and not
    raised: the server has stopped either way, and everything else in the folder is still removed."""
    try:
        shutil.rmtree(scratch)
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)  # whatever else can go
        say(
            f"rlnb serve: could not remove the checkpoints' temporary folder {scratch} ({exc.filename or scratch}: "
            f"{exc.strerror or exc}); remove it by hand"
        )


def _serve_app(
    args: argparse.Namespace,
    models: dict[str, str],
    scratch: str | None,
    extra: dict[str, Any],
    limits: dict[str, Any],
) -> tuple[int, bool]:
    """The server until it is stopped: its exit code, and whether operations were abandoned still running."""
    from rlnb._hosts import loopback
    from rlnb.server.app import app_for, bind, reachable, url_host
    from rlnb.server.app import run as listen
    from rlnb.server.state import StateDirError

    try:
        sock = bind(args.host, args.port)  # a port in use, said before the address is announced or the state is
        # locked: an in-process caller whose bind fails would hold --state-dir's lock until its registry is collected
    except ValueError as exc:
        print(f"rlnb serve: {exc}", file=sys.stderr)
        return 2, False
    args.port = sock.getsockname()[1]  # --port 0: the free port bound, for the announced address and presigned URLs
    try:
        app = app_for(
            args.host,
            args.port,
            token=args.token,
            device=args.device,
            op_delay=args.op_delay,
            checkpoint_dir=args.checkpoint_dir or scratch,
            fail_rate=args.fail_rate,
            result_offload_bytes=args.offload_results_over,
            models=models,
            dtype=args.dtype,
            trust_remote_code=args.trust_remote_code,
            **extra,
            **limits,
        )
    # A setting out of range; a state directory that is locked, is a file, or has a bad signing key.
    except (ValueError, StateDirError) as exc:
        sock.close()
        said = f"--state-dir: {exc}" if isinstance(exc, StateDirError) else as_option(exc)
        print(f"rlnb serve: {said}", file=sys.stderr)
        return 2, False
    except BaseException:  # Ctrl-C or SIGTERM during a model's load: the port is let go at once
        sock.close()
        raise
    if args.token is None and not loopback(args.host):
        print(f"rlnb serve: warning: --host {args.host} takes requests from other machines and there is no --token: "
              "anyone who reaches this port can train, sample and download checkpoints; give --token, or --host "
              "127.0.0.1 for this machine only", file=sys.stderr)  # fmt: skip
    # the address clients take: the API's own root (.../v1/rl), pasted into rlnb.connect, would be a 404 on /v1/rl/v1/rl
    address = f"http://{url_host(reachable(args.host))}:{args.port}"
    if args.public_url is None and reachable(args.host) != args.host:  # a wildcard: the links name this machine
        print(f"rlnb serve: warning: --host {args.host} takes requests from other machines, but its presigned links "
              f"(checkpoint downloads, and the uploads the SDK makes of bodies over 0.5 MiB) name {address}, which "
              f"only this machine reaches: give --public-url http://ADDRESS:{args.port}, the address the other "
              "machines use", file=sys.stderr)  # fmt: skip
    try:  # connections made once it is announced wait for uvicorn's accept, not refused until uvicorn listens
        sock.listen()
        show(f"rlnb serve: {address} (give it to rlnb.connect or Together(base_url=...); "
             "the API is under /v1/rl, OpenAPI at /openapi.json)")  # fmt: skip
        show(f"rlnb serve: models {', '.join(models)}; threads per session on the CPU: {threads_said(args.threads)}")
    except BaseException as exc:  # its output closed (`| head -1`), or a stop: the port and the state are let go
        sock.close()
        app.state.registry.close(0)
        if isinstance(exc, StdoutFailed):  # `>/dev/full`: one line, not a traceback
            say(f"rlnb serve: {exc}")
            return 1, False
        raise
    code, reader, told = 0, ReaderWatch(), threading.Lock()  # `rlnb serve | head -1`: its reader leaves once it has
    # the address; ``told``: held once the Ctrl-C's line is out, at the signal (the stop may wait 40 s) or after it

    def stopped(sig: int = signal.SIGINT) -> None:
        if sig == signal.SIGINT and told.acquire(blocking=False):
            say("rlnb serve: stopped (Ctrl-C)")

    try:  # the reader's watch started where a SIGTERM it raises at once waits for uvicorn's handler
        listen(app, sock, watch=reader.start, on_stop=stopped)
    except KeyboardInterrupt:  # Ctrl-C: uvicorn shuts down, then re-raises it (a traceback through asyncio's runner)
        stopped()
        code = 130
    except SystemExit as exc:  # SIGTERM, re-raised by uvicorn once it has shut down: the handler above
        code = exc.code if isinstance(exc.code, int) else 0
    finally:
        reader.close()
    if reader.gone.is_set() and code == 0:  # its SIGTERM, not a Ctrl-C's: as the stop at a write says it
        quiet(sys.stdout)
        say("rlnb serve: stopped, its output was closed")
        code = 141
    abandoned = app.state.registry.abandoned or []
    for gone in abandoned:  # an operation ends FAILED; a model's build, its session ERROR
        say(
            f"rlnb serve: abandoned {gone.what}, unfinished when the stop gave up on it ({gone.end}"
            f"{' in --state-dir' if args.state_dir else ''})"
        )
    return code, bool(abandoned)
