"""The forms a key may take in a text, and one compiled pattern of every form of many keys (``Masker``).

Checked against each form of each key in turn, with 257 keys (the credentials kept of a load balancer's rotating
cookie) every string of a decoded body would cost 257 times the work of one key. A ``Masker`` scans a text once,
whatever the number of keys; ``rlnb.secrets.redaction.matcher`` keeps one per change of the keys it knows.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"


@functools.lru_cache(maxsize=1024)
def forms(key: str) -> tuple[str, ...]:
    """How ``key`` may appear in a text: as written, as ``repr`` or ``ascii`` quote it (``\\n`` for a newline), as the
    ``repr`` of its UTF-8 bytes quotes it (``b'Bearer ...\\n'`` in an h11 or httpcore message), percent-encoded (a
    query key with a ``/`` or ``+`` in a URL; with a space, as ``+``, which httpx writes in a query). Cached: every
    log record and error message is redacted."""
    escaped, as_ascii = repr(key)[1:-1], ascii(key)[1:-1]
    as_bytes = repr(key.encode("utf-8", "surrogatepass"))[2:-1]
    encoded = quote(key, safe="", errors="surrogatepass")
    in_query = quote_plus(key, safe="", errors="surrogatepass")
    return tuple(dict.fromkeys(k for k in (key, escaped, as_ascii, as_bytes, encoded, in_query) if k))


class Masker:
    """Masks every form of some keys in a text: those of ``keys`` in one pass of one compiled pattern, those of
    ``few`` (keys added since it was compiled: compiling costs milliseconds, and a load balancer's cookie changes
    with each answer) one by one. ``uses`` counts the texts it read (``redaction.matcher`` compiles all once
    enough texts paid for the few)."""

    def __init__(self, keys: Iterable[str]):
        self.keys = frozenset(keys)
        self.pattern = _compile(self.keys)
        self.few: list[str] = []
        self.uses = 0

    def search(self, text: str) -> bool:
        """Whether ``text`` holds a form of one of the keys."""
        self.uses += 1
        found = self.pattern is not None and self.pattern.search(text) is not None
        return found or any(form in text for form in self.few)

    def sub(self, text: str) -> str:
        """``text`` with every form of every key replaced by ``***``."""
        self.uses += 1
        text = self.pattern.sub(MASK, text) if self.pattern is not None else text
        for form in self.few:  # the longest first: a key that contains another
            if form in text:
                text = text.replace(form, MASK)
        return text

    def adding(self, keys: frozenset[str], most: int) -> Masker:
        """A masker of ``keys``: this one's pattern and, as ``few``, those of ``keys`` it lacks, unless more than
        ``most`` (then a pattern of them all). A key dropped since stays masked until then."""
        new = keys - self.keys
        if len(new) > most or not keys:
            return Masker(keys)
        masker = copy.copy(self)
        masker.few, masker.uses = sorted({form for key in new for form in forms(key)}, key=len, reverse=True), 0
        return masker


def _compile(keys: Iterable[str]) -> re.Pattern[str] | None:
    """A pattern that matches each form of each of ``keys``, the longest where several start at one place (a key that
    contains another): a trie, so that each place of a text costs about as much whatever the number of keys."""
    trie: dict[str, Any] = {}
    for form in {form for key in keys for form in forms(key)}:
        node = trie
        for char in form:
            node = node.setdefault(char, {})
        node[""] = {}
    return re.compile(_alternatives(trie)) if trie else None


def _alternatives(node: dict[str, Any]) -> str:
    """The regex of a trie's ``node``: its branches, optional where a form ends there (greedy: the longest first)."""
    branches = []
    for char, child in node.items():
        if char:
            run = re.escape(char)
            while len(child) == 1 and "" not in child:  # a run of one branch: literal, no nesting per character
                char, child = next(iter(child.items()))
                run += re.escape(char)
            branches.append(run + _alternatives(child))
    if not branches:
        return ""
    group = "(?:" + "|".join(branches) + ")"
    return group + "?" if "" in node else group if len(branches) > 1 else branches[0]


@functools.lru_cache(maxsize=16)
def of(keys: tuple[str, ...]) -> Masker:
    """A masker of ``keys`` (a list a caller holds: a client's, the credentials a log line lists); the last 16 kept
    (each holds a compiled pattern)."""
    return Masker(keys)
