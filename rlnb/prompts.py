"""The checks of what a notebook hands over as text or token ids, before any codec reads it: token ids in the
forms a notebook has them, text a tokenizer can encode, chat messages a template renders as written, and what
``tokenizer=`` may be. Apart from ``rlnb.text`` (the codecs) so that each stays small; each check's error names
the argument it refuses.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rlnb._options import is_integer


def tokenizer_spec(tokenizer: Any) -> Any:
    """``tokenizer=`` as ``rlnb.connect`` takes it: None, a folder or cached hub id (a ``str``; an ``os.PathLike``
    as its path), or a tokenizer object with ``encode`` and ``decode``; anything else is a ``TypeError`` naming
    ``tokenizer`` (it was taken for a tokenizer, and the first text failed on its missing ``encode``)."""
    if tokenizer is None or isinstance(tokenizer, str):
        return tokenizer
    if isinstance(tokenizer, os.PathLike):
        return os.fspath(tokenizer)
    if callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None)):
        return tokenizer
    raise TypeError(
        f"tokenizer must be a Hugging Face tokenizer (with encode and decode), its folder or a hub id, got "
        f"{a_type(tokenizer)}: {tokenizer!r}"[:300]
    )


def a_type(value: Any) -> str:
    """``value``'s type with its article, for an error: ``an int``, ``a set``."""
    name = type(value).__name__
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def token_ids(tokens: Any, name: str) -> list[int]:
    """``tokens`` as a list of ints: a list, tuple, bytes, an iterator, or an array / tensor of ids; text, fractions
    and bools are a ``TypeError`` naming ``name`` (``int(1.7)`` would quietly read token 1)."""
    if isinstance(tokens, str) or tokens is None:
        raise TypeError(f"{name} must be token ids (a list of integers), got {a_type(tokens)}")
    listed = tokens.tolist() if hasattr(tokens, "tolist") else tokens
    if is_integer(listed) or not isinstance(listed, Sequence | Iterator):  # a 0-d array's tolist() is one number
        raise TypeError(f"{name} must be token ids (a list of integers), got {a_type(listed)}")
    listed = list(listed)  # a whole float is an id, as the wire's int64 tensor data holds them: 223.0
    bad = next((t for t in listed if not (is_integer(t) or (isinstance(t, float) and t.is_integer()))), None)
    if bad is not None:
        raise TypeError(f"{name} must be integer token ids, got {bad!r}")
    return [int(t) for t in listed]


def surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (``"\\ud800"``: half of a UTF-16 pair, from a bad escape or a
    string cut in two), None when it is valid Unicode. No tokenizer encodes one, and no decoded text holds one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_text(text: str, name: str) -> None:
    """``ValueError`` naming ``name`` if ``text`` holds a lone surrogate."""
    at = surrogate(text)
    if at is not None:
        raise ValueError(f"{name} holds a lone surrogate, {text[at]!r} at position {at}: it is not valid Unicode text")


def check_messages(messages: Sequence[Any], name: str = "messages") -> None:
    """``ValueError`` naming the message unless each is a mapping with a non-empty string ``role`` and a
    ``content`` that is a string or a list of content parts (``None`` only beside ``tool_calls``): a chat
    template renders a missing field as nothing, and ``5`` as ``"5"``, a prompt no one wrote."""
    for i, m in enumerate(messages):
        where = f"{name}[{i}]"
        if not isinstance(m, Mapping):
            raise ValueError(f"{where} must be a chat message ({{'role': ..., 'content': ...}}), got {m!r}"[:300])
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"{where}['role'] must be a non-empty string (e.g. 'user'), got {role!r}"[:300])
        if not (isinstance(content, str | list) or (content is None and m.get("tool_calls"))):
            raise ValueError(
                f"{where}['content'] must be a string (or a list of content parts; None only with tool_calls), "
                f"got {content!r}"[:300]
            )
