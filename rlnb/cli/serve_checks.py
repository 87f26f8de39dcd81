"""``rlnb serve``'s options checked before anything starts: each one out of range is a ``ValueError`` naming it,
said by ``serve`` as one line ``rlnb serve: ...`` and exit status 2 (argparse's usage and "rlnb: error: ..." for
some, before), before a port is bound, a folder made or a model loaded."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any, Final

from rlnb._input.checks import refuse_dangling_link, refuse_not_folder, user_path
from rlnb._input.shown import shown
from rlnb.cli.options import ascii_integer, checked_threads, refused_option

TOKEN_ENV = "RLNB_SERVE_TOKEN"
"""The environment variable ``--token`` defaults to: a flag's value is in the process's command line, which every
user of the machine reads (``ps``, ``/proc/PID/cmdline``); the environment only its owner."""


SETTING_FLAGS: Final = {
    "token": "--token",
    "device": "--device",
    "op_delay": "--op-delay",
    "fail_rate": "--fail-rate",
    "checkpoint_dir": "--checkpoint-dir",
    "public_url": "--public-url",
}
"""The ``ServerSettings`` fields whose own checks refuse what an ``rlnb serve`` option gave, each with its option: a
setting's error names the field, a Python caller's word for it (``create_app(op_delay=...)``), and ``rlnb serve`` says
the option instead (``op_delay must be ...`` would puzzle one who typed ``--op-delay``). The other options are checked
naming themselves before the settings are made (``checked``); a state directory's errors are the registry's."""


def as_option(exc: ValueError) -> str:
    """A setting's error (``op_delay must be ...``: each names its field first; the engine's ``OptionRefused`` by its
    field) with that field said as its ``rlnb serve`` option; any other message as it is."""
    from rlnb.errors import OptionRefused  # here: rlnb.errors reads rlnb.wire (pydantic), which ``--help`` never needs

    if isinstance(exc, OptionRefused):
        return refused_option(exc, SETTING_FLAGS.get(exc.field, f"--{exc.field}"))
    message = str(exc)
    field = re.match(r"[a-z_]+\b", message)
    if field is None or field.group() not in SETTING_FLAGS:
        return message
    return SETTING_FLAGS[field.group()] + message[field.end() :]


def checked(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """``args`` checked (``ValueError``; ``ImportError`` for a model whose libraries are missing), ``args.port`` and
    ``args.token`` as served: the ``--limit`` settings and the models served (name → path or hub id)."""
    if not args.host.strip():  # an unset variable: "" binds every interface, where the default is this machine only
        raise ValueError("--host is empty (an unset variable?): give an address, such as 127.0.0.1 (this machine "
                         "only) or 0.0.0.0 (every interface), or leave it out")  # fmt: skip
    if any(c.isspace() or not c.isprintable() for c in args.host):  # localhost\0 bound localhost, then a bare
        raise ValueError(f"--host {args.host!r} is not an address of this machine: it holds whitespace or a "
                         "control character")  # "embedded null character"  # fmt: skip
    if args.token is None and TOKEN_ENV in os.environ:
        args.token = os.environ[TOKEN_ENV]
        if not args.token:  # exported empty: "no auth" is said by leaving it unset, as by leaving --token out
            raise ValueError(f"${TOKEN_ENV} is empty: give a token there, or unset it to turn auth off")
        from rlnb.secrets.redaction import check_key  # the settings' check would name --token, which was not given

        check_key(args.token, f"${TOKEN_ENV}")
    for option, value in (("--state-dir", args.state_dir), ("--checkpoint-dir", args.checkpoint_dir)):
        if value is not None and not value.strip():  # "" was the working folder, or (checkpoints) ignored
            raise ValueError(f"{option} is empty (an unset variable?): give a folder or leave it out")
        if value is not None:  # a link to nothing (or a path through one) was "File exists"
            user_path(option, value)  # a NUL: os's bare "embedded null byte", naming no option
            refuse_dangling_link(option, Path(value))
    if args.state_dir is not None:  # a file or a named pipe there was "File exists" too
        refuse_not_folder("--state-dir", Path(args.state_dir), "the server's state goes")
    from rlnb.server.settings import BYTES_MAX, ServerSettings, check_pending_bytes, parse_limits

    _given_once(args.limit)
    args.port, limits = _port(args.port), parse_limits(args.limit)
    body = limits.get("max_body_bytes", ServerSettings.max_body_bytes)  # the default where not given
    check_pending_bytes(body, limits.get("max_pending_bytes"), "--limit ")
    args.threads = checked_threads(args.threads)
    over = args.offload_results_over  # a size in bytes, as the byte limits, not 10**39
    if over is not None and not 0 <= over <= BYTES_MAX:
        raise ValueError(f"--offload-results-over must be 0 to 2**63 - 1 bytes (leave it out: never), got {over}")
    return limits, _served_models(args.model, args.trust_remote_code)


def _port(text: str) -> int:
    """A TCP port to listen on (``ValueError`` naming --port): 0 is any free port, the one bound announced (and in
    the presigned URLs); past 65535 the socket layer wraps it silently."""
    try:
        port = ascii_integer(text)
    except ValueError:
        raise ValueError(f"--port must be an integer in 0-65535 (0: any free port), got {shown(text)}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be 0-65535 (0: any free port), got {port}")
    return port


def _given_once(limits: list[str]) -> None:
    """A ``ValueError`` naming a limit given twice: taking the last without a word would raise a user's lower value
    back to a script's default given after it, silently."""
    seen: dict[str, str] = {}
    for item in limits:
        name = item.partition("=")[0]
        if name in seen:
            raise ValueError(f"--limit {name} is given twice ({seen[name]!r}, then {item!r}): give it once")
        seen[name] = item


def _served_models(options: list[str], trust_remote_code: bool) -> dict[str, str]:
    """The built-in models and each ``--model NAME=PATH_OR_ID``; a model that cannot be found stops here."""
    from rlnb.server.models import check_served, parse_model_option
    from rlnb.server.settings import DEFAULT_MODELS

    models = dict(DEFAULT_MODELS)
    for option in options:
        name, spec = parse_model_option(option)
        if name in models:
            raise ValueError(f"--model {name}: the name is already served")  # was argparse's usage and "rlnb:"
        try:  # the settings' own check, here before the port is bound, said as the option typed
            check_served({name: spec}, trust_remote_code)
        except (ImportError, ValueError) as exc:  # ImportError: its libraries are missing, the pip install named
            raise type(exc)(f"--model {name}: {str(exc).removeprefix(f'models[{name!r}]: ')}") from None
        models[name] = spec
    return models
