"""API keys never leave rlnb: every text rlnb shows, raises or logs can be scrubbed of them.

``register(key)`` remembers a key (the remote client does, for its own), ``remember(value)`` a credential seen on a
request it sent (the latest ``SEEN_LIMIT``); ``redact(text)`` replaces each remembered key with ``***``, as written
and as Python's ``repr`` of it (or of its bytes) would quote it.
The client redacts what a server sends after JSON decoding, so a server that echoes the key with ``\\u``
escapes is caught too. ``check_key`` refuses a key that no HTTP header can carry (a newline read from a
file, a control or a non-ASCII character) before it is sent anywhere, without quoting it.

``hide(key)`` wraps a key in pydantic's ``SecretStr`` where rlnb first receives it (``rlnb.connect``,
``RemoteBackend.connect``, ``APIClient``): a traceback that shows each frame's locals (pytest ``--showlocals``,
IPython's verbose mode, rich's ``show_locals``) printed ``api_key='sk-...'`` from those frames. The remote client
unwraps it only where it writes the ``Authorization`` header.

httpcore's DEBUG log prints every response header, so a server or proxy that echoes the Authorization
header puts the key in it. ``RedactingFilter`` scrubs log records (message, traceback, stack; a traceback that quotes
a key is left as scrubbed text only, for handlers that render one themselves, as rich's does); one sits on the
``rlnb`` logger and on httpx's, httpcore's and HTTP/2's (hpack, h2) own (``HTTP_LOGGERS``), masking the keys rlnb
has registered, and ``configure_logging`` installs a handler with it for rlnb, httpx and httpcore.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import OrderedDict
from typing import IO, Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from rlnb.secrets import masks
from rlnb.secrets.masks import MASK

MIN_LENGTH = 8
"""Shorter strings are not treated as secrets (masking "a" everywhere would garble every message): ``check_key``
refuses them as keys."""

_keys: set[str] = set()
_lock = threading.Lock()
_generation = [0]
"""Bumped (under ``_lock``) each time the keys registered or remembered change: ``matcher`` rebuilds its pattern then
only."""


def register(key: str) -> None:
    """Remember ``key`` so that ``redact`` hides it from now on (for the life of the process)."""
    if len(key) >= MIN_LENGTH:
        with _lock:
            if key not in _keys:
                _keys.add(key)
                _generation[0] += 1


def hide(key: Any) -> Any:
    """``key`` as a ``SecretStr`` when it is a str, whose repr and str are masked; anything else as it is (a
    ``SecretStr`` already, None, or a wrong type that ``check_key`` names)."""
    return SecretStr(key) if isinstance(key, str) else key


def hide_option(options: dict[str, Any]) -> None:
    """``options["api_key"]``, where given, hidden in place (``hide``): the first thing ``connect``, ``sweep`` and
    ``lr_find`` do with their options, so that no traceback's locals show the key from their frames."""
    if "api_key" in options:
        options["api_key"] = hide(options["api_key"])


_SCHEMES = frozenset({"bearer", "basic", "token"})
"""Authorization schemes a key copied from a header line starts with."""


def check_key(key: object, name: str) -> None:
    """Nothing, unless ``key`` (a str or ``SecretStr``) is neither (``TypeError``), holds a character an HTTP header
    cannot carry as written (``ValueError``): whitespace (a key read from a file keeps its newline), a control or a
    non-ASCII character, or is shorter than ``MIN_LENGTH`` (a placeholder, which ``redact`` could not mask without
    garbling every text). The message names ``name`` and the position or length, never the key; nor do this frame's
    locals (a str is wrapped first)."""
    key = hide(key)
    if not isinstance(key, SecretStr):
        raise TypeError(f"{name} must be a str, got {type(key).__name__}")
    for i, char in enumerate(key.get_secret_value()):
        if not "!" <= char <= "~":
            what = "a non-ASCII character" if ord(char) > 0x7F else "a control character"
            what = "whitespace" if char.isspace() else what
            rest = key.get_secret_value()[i:].isspace()  # a bool: no local holds the key
            hint = " (a key read from a file keeps its newline: strip it)" if rest else ""
            if char == " " and key.get_secret_value()[:i].lower() in _SCHEMES:  # "Bearer sk-..." from a curl line
                scheme = key.get_secret_value()[:i]  # one of _SCHEMES: no part of the key
                hint = f" (rlnb writes the Authorization header itself: pass the key without '{scheme} ')"
            raise ValueError(
                f"{name} holds {what} at position {i} of its {len(key)} characters{hint}: an API key is printable "
                "ASCII without spaces"
            )
    if len(key) < MIN_LENGTH:  # "k": a placeholder, and masking every "k" garbled each message ("not ***nown")
        raise ValueError(
            f"{name} is {len(key)} character(s) long: an API key has at least {MIN_LENGTH} (Together's have dozens). "
            "A placeholder is not needed: rlnb serve without --token takes requests with no key"
        )


def take_key(given: Any, variable: str) -> SecretStr | None:
    """The key ``given``, else ``$variable``'s, checked (``check_key``: before it is registered or sent, so that no
    header, message or log line can quote a bad one) and registered; None when there is none."""
    given = hide(given)  # first: this frame's locals show no key
    key = given if given is not None else hide(os.environ.get(variable))
    if key:
        check_key(key, "api_key" if given is not None else variable)
    elif given is not None and not isinstance(given, SecretStr):
        raise TypeError(f"api_key must be a str, got {type(given).__name__}")
    if not key:
        return None
    register(key.get_secret_value())
    return key


def check_url(url: str, name: str) -> str:
    """``url``, unless it carries user info (``https://user:password@host``): httpx would send it as Basic auth in
    place of the Bearer key, and it would stand in every repr, error and run folder. The ``ValueError`` names
    ``name`` and shows the URL with the user info masked, never the password."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        shown = parts._replace(netloc=f"{MASK}@{parts.netloc.rpartition('@')[2]}").geturl()  # the last @ ends it
        raise ValueError(
            f"{name} must not carry credentials (user:password@ before the host; got {shown}): the server takes the "
            "API key as a Bearer token, so pass the URL without them and the key as api_key"
        )
    return url


SEEN_LIMIT = 256
"""How many of the credentials seen on requests (``remember``) are kept, the latest: a load balancer's cookie that
changes with every answer (``AWSALB``) made one more each call, for the life of the process, and each text took
longer to redact."""
_seen: OrderedDict[str, None] = OrderedDict()


def remember(value: str) -> None:
    """Mask ``value``, a credential seen on a request rlnb sent (``rlnb.remote.sent``), as ``register`` does; of these,
    the ``SEEN_LIMIT`` seen last are kept."""
    if len(value) >= MIN_LENGTH:
        with _lock:
            if value in _seen:  # still sent: kept, and the pattern stays as it is
                _seen.move_to_end(value)
                return
            _seen[value] = None
            _generation[0] += 1
            while len(_seen) > SEEN_LIMIT:
                _seen.popitem(last=False)


def known() -> list[str]:
    """The registered keys and the credentials remembered (a copy)."""
    with _lock:
        return list(_keys.union(_seen))


FEW = 32
"""How many keys added since a ``Masker``'s pattern was compiled it checks one by one before it is compiled again
(or before ``FEW_USES`` texts were read: a store that stopped changing)."""
FEW_USES = 2000
_matchers: dict[str | None, tuple[int, masks.Masker]] = {}


def matcher(extra: str | None = None) -> masks.Masker:
    """A ``Masker`` of every key known (and ``extra``, a client's own), made again only when they change
    (``_generation``), from the last one (``Masker.adding``)."""
    generation, masker = _matchers.get(extra, (-1, None))
    stale = masker is not None and bool(masker.few) and masker.uses > FEW_USES
    if masker is None or stale or generation != _generation[0]:
        with _lock:
            generation, keys = _generation[0], frozenset([*_keys, *_seen, *([extra] if extra else [])])
        masker = masks.Masker(keys) if masker is None or stale else masker.adding(keys, FEW)
        if len(_matchers) > 16:  # one per client's own key: bounded
            _matchers.clear()
        _matchers[extra] = generation, masker
    return masker


def redact(text: str, extra: str | None = None) -> str:
    """``text`` with every registered key (in each of its ``forms``; and ``extra``) replaced by ``***``."""
    return matcher(extra).sub(text)


def holds(text: str, keys: list[str]) -> bool:
    """Whether ``text`` holds one of ``keys`` in one of its ``forms``."""
    return masks.of(tuple(keys)).search(text)


def redact_keys(text: str, keys: list[str]) -> str:
    """``text`` with each of ``keys``, in each of its ``forms``, replaced by ``***``."""
    return masks.of(tuple(keys)).sub(text)


class RedactingFilter(logging.Filter):
    """A logging filter that replaces registered keys in each record's message (arguments included) and in its
    traceback and stack text (an error a transport raised may quote the request's headers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask every key rlnb has seen in the record's message, arguments, traceback and stack; never drops a record.
        The traceback is rendered here, as a handler's ``Formatter`` would, and kept as ``exc_text``, which the
        standard formatters print as it is. A handler that renders ``exc_info`` itself (rich's ``RichHandler`` with
        ``rich_tracebacks``, locals and all) would print the key: a traceback that quotes one, in a message or a
        frame's locals, is left as that masked text only (``exc_info`` None), which such a handler prints instead."""
        masker = matcher()
        if masker.pattern is None and not masker.few:
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call: the handler's handleError reports it, masked
            record.msg, record.args = masker.sub(str(record.msg)), _masked_args(record.args, masker)
            return True
        clean = masker.sub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_info and (masker.search(record.exc_text or "") or _in_locals(record.exc_info[1], masker)):
            record.exc_info = None
        if record.exc_text:
            record.exc_text = masker.sub(record.exc_text)
        if record.stack_info:
            record.stack_info = masker.sub(record.stack_info)
        return True


def _masked_args(args: Any, masker: masks.Masker) -> Any:
    """A record's ``args`` that cannot be formatted, each masked as its ``repr`` (``handleError`` prints them)."""
    if isinstance(args, tuple):
        return tuple(masker.sub(repr(arg)) for arg in args)
    return masker.sub(repr(args)) if args else args


def _in_locals(error: BaseException | None, masker: masks.Masker) -> bool:
    """Whether a local of a frame ``error`` (or an error of its chain) passed through holds a key (``masker``; its
    traceback's text is the record's ``exc_text``). Each local's ``repr`` is taken on its own: ``capture_locals=True``
    let one that raises escape the filter, so the ``log.exception`` of a handler that keeps going raised instead of
    logging."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        each = todo.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        todo += [each.__cause__, each.__context__]
        tb = each.__traceback__
        while tb is not None:
            for value in tb.tb_frame.f_locals.values():
                try:
                    if masker.search(repr(value)):
                        return True
                except Exception:  # noqa: BLE001 - a local whose repr raises is printed by no handler either
                    continue
            tb = tb.tb_next
    return False


def configure_logging(
    level: int | str = logging.INFO, *, stream: IO[str] | None = None, http_level: int | str | None = None
) -> logging.Handler:
    """Log rlnb (and httpx / httpcore, at ``http_level``, default ``level``) to ``stream`` (stderr) through a
    ``RedactingFilter``, so that a key echoed by a server never reaches the log. The three loggers stop
    propagating to the root logger (whose handlers would print the records unfiltered). Returns the
    handler; to keep your own logging setup, add ``RedactingFilter()`` to your handlers instead."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter())
    for name, lvl in (("rlnb", level), ("httpx", http_level or level), ("httpcore", http_level or level)):
        logger = logging.getLogger(name)
        logger.setLevel(lvl)
        logger.addHandler(handler)
        logger.propagate = False
    return handler


HTTP2_LOGGERS = ("hpack", "hpack.hpack", "hpack.table", "h2", "h2.connection")
"""The loggers of HTTP/2's header codec and stack (``httpx[http2]``, ``http2=True``): hpack's DEBUG lines list every
header it encodes or decodes, the Authorization header with the key included."""
HTTP_LOGGERS = (
    tuple(
        f"{package}.{module}"
        for package in ("httpcore", "httpcore2")
        for module in ("connection", "http11", "http2", "proxy", "socks")
    )
    + ("httpx", "httpx2")
    + HTTP2_LOGGERS
)
"""The loggers of httpx and httpcore (and of httpx2, which Starlette's TestClient uses), and of HTTP/2's ``hpack`` and
``h2``: each module logs to its own, and a logger's filter sees only the records made on it, not those its children
pass up."""

_FILTER = RedactingFilter()
for _name in ("rlnb", *HTTP_LOGGERS):
    logging.getLogger(_name).addFilter(_FILTER)
"""Every record rlnb, httpx and httpcore log is scrubbed wherever it goes, without touching anyone's levels, handlers
or propagation (``configure_logging`` is opt-in; without it, a record would go to the root logger's handlers, or
Python's last-resort stderr, as written: httpcore's DEBUG lines list the response headers, one echoing the key
included)."""
