"""The checks of what a notebook hands over as text or token ids, before any codec reads it: token ids in the
forms a notebook has them, text a tokenizer can encode, chat messages a template renders as written, and what
``tokenizer=`` may be; ``sample``'s arguments as the wire takes them (``prompt_list``, ``stop_list``)
and as the model can take them (``check_ids``, ``check_room``). Apart from ``rlnb.text.codec`` (the codecs) so that
each stays small; each check's error names the argument it refuses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from rlnb import wire
from rlnb._input.checks import is_integer
from rlnb._input.shown import shown

SHOWN = 100
"""Characters of a value that a check's error repeats (``shown``): the field and its rule stay in sight."""
REPLACEMENT = "\ufffd"
"""What a decoder shows for bytes that are no (complete) character; a stop string holding it cannot be matched."""


def tokenizer_spec(tokenizer: Any) -> Any:
    """``tokenizer=`` as ``rlnb.connect`` takes it: None, a folder or cached hub id (a ``str``; an ``os.PathLike``
    as its path), or a tokenizer object with ``encode`` and ``decode``; anything else is a ``TypeError`` naming
    ``tokenizer`` (taken for a tokenizer, it would fail only at the first text, on its missing ``encode``)."""
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
    listed = tokens.tolist() if hasattr(tokens, "tolist") else tokens  # an array's or tensor's are plain ints
    if type(listed) in (list, tuple) and wire.only(listed, int):  # the common case, with no Python step per id
        return list(listed)
    if is_integer(listed) or not isinstance(listed, Sequence | Iterator):  # a 0-d array's tolist() is one number
        raise TypeError(f"{name} must be token ids (a list of integers), got {a_type(listed)}")
    listed = list(listed)  # a whole float is an id, as the wire's int64 tensor data holds them: 223.0
    bad = next(
        (i for i, t in enumerate(listed) if not (is_integer(t) or (isinstance(t, float) and t.is_integer()))), None
    )  # an index, not the id: a None among the ids is named too
    if bad is not None:
        raise TypeError(f"{name} must be integer token ids, got {listed[bad]!r}")
    return [int(t) for t in listed]


def surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (``"\\ud800"``: half of a UTF-16 pair, from a bad escape or a
    string cut in two), None when it is valid Unicode. No tokenizer encodes one, and no decoded text holds one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def escaped(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``"\\udcff"``): for where it must be shown or stored
    and no library, table or file takes one (a server's JSON escape, a folder named in another encoding)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


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
            raise ValueError(
                f"{where} must be a chat message ({{'role': ..., 'content': ...}}), got {shown(m, SHOWN)}"[:300]
            )
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(
                f"{where}['role'] must be a non-empty string (e.g. 'user'), got {shown(role, SHOWN)}"[:300]
            )
        if not (isinstance(content, str | list) or (content is None and m.get("tool_calls"))):
            raise ValueError(
                f"{where}['content'] must be a string (or a list of content parts; None only with tool_calls), "
                f"got {shown(content, SHOWN)}"[:300]
            )
        deep = _nested_past(m, DEPTH)
        if deep is not None:
            raise ValueError(f"{where}[{deep!r}] is nested more than {DEPTH} levels deep: no chat template renders it "
                             "(transformers' own reading of it recurses past Python's limit)"[:300])  # fmt: skip


DEPTH = 100
"""Lists and dicts a chat message may nest (a tool call's arguments nest a few): content 5,000 lists deep, or a list
that holds itself, was a ``RecursionError`` from inside the check or transformers."""


def _nested_past(message: Mapping[Any, Any], depth: int) -> Any:
    """The key of ``message`` whose value nests lists, tuples and dicts more than ``depth`` deep, or None; read
    without recursion."""
    for key, value in message.items():
        stack = [(value, 1)]
        while stack:
            item, level = stack.pop()
            if isinstance(item, Mapping | list | tuple):
                if level > depth:
                    return key
                stack.extend((v, level + 1) for v in (item.values() if isinstance(item, Mapping) else item))
    return None


def _is_token_list(p: Any) -> bool:
    if type(p) in (list, tuple) and p and wire.only(p, int):  # the common case, with no Python step per id
        return True
    return isinstance(p, Sequence) and not isinstance(p, str) and bool(p) and all(is_integer(t) for t in p)


def prompt_list(prompts: Any) -> list[Any]:
    """One prompt or many, as a list of prompts. A generator is read once, whole (testing its first item
    first would lose it); an array or tensor of ids is its ``tolist()``. A message on its own, a set (no order
    to match results by) and what is no prompt are a ``TypeError``; no prompt at all a ``ValueError``."""
    if hasattr(prompts, "tolist"):  # numpy, torch
        prompts = prompts.tolist()
    elif isinstance(prompts, Iterator):
        prompts = list(prompts)
    if isinstance(prompts, Mapping):
        raise TypeError("prompts is one chat message: a conversation is a list of messages, [message]")
    if isinstance(prompts, str) or _is_token_list(prompts):
        return [prompts]
    if isinstance(prompts, AbstractSet) or not isinstance(prompts, Iterable):  # a dict's values are in order
        raise TypeError(
            f"prompts must be a prompt (text, token ids or chat messages) or a list of prompts, got {a_type(prompts)}"
            + (": it has no order to match the results by" if isinstance(prompts, AbstractSet) else "")
        )
    items = list(prompts)
    if not items:
        raise ValueError("prompts is empty: pass at least one prompt")
    if all(isinstance(m, Mapping) for m in items):
        return [items]  # one conversation
    if is_integer(items[0]):  # one prompt of token ids, something else among them: "prompts[0] must be a string" hid it
        bad = next((i for i, t in enumerate(items) if not is_integer(t)), None)
        if bad is None:  # ids in an iterable that is no sequence (a dict's values): one prompt
            return [items]
        raise TypeError(f"prompts is one list of token ids, but its item {bad} is {a_type(items[bad])} "
                        f"{items[bad]!r}: token ids are integers")  # fmt: skip
    return items


EMPTY_STOP = (
    "is an empty string, which the API gives no meaning (every text contains it: a server that matches it ends every "
    "sequence at once); pass stop=None for no stop strings"
)
"""Why an empty stop string is refused, by the client, the in-process engine and ``rlnb serve`` alike."""


def stop_list(stop: Any) -> list[str] | None:
    """``stop`` as the wire's list of strings (``"\\n\\n"`` is one string), or None; anything but a string or
    strings is a ``TypeError`` naming it (``b"x"`` would be the strings of its byte values), an empty string a
    ``ValueError`` (``EMPTY_STOP``)."""
    if isinstance(stop, str) and not stop:
        raise ValueError(f"stop {EMPTY_STOP}")
    if stop is None or isinstance(stop, str):
        stop = [stop] if stop else []
    if isinstance(stop, Iterator):
        stop = list(stop)
    if not isinstance(stop, Sequence) or isinstance(stop, bytes | bytearray):
        raise TypeError(f"stop must be a string or a list of strings, got {a_type(stop)}")
    bad = next((i for i, x in enumerate(stop) if not isinstance(x, str)), None)
    if bad is not None:
        raise TypeError(f"stop[{bad}] must be a string, got {stop[bad]!r}"[:300])
    for i, x in enumerate(stop):  # decoded text never holds a lone surrogate: such a stop could never match
        if not x:
            raise ValueError(f"stop[{i}] {EMPTY_STOP}")
        check_text(x, f"stop[{i}]")
        if REPLACEMENT in x:
            raise ValueError(f"stop[{i}] holds U+FFFD, which decoded text shows for bytes that are no character yet: "
                             "it cannot be matched")  # fmt: skip
    return list(stop) or None


def check_ids(ids: Sequence[int], name: str, vocab: int | None) -> None:
    """``ValueError`` naming ``name`` if an id is below 0 or past the vocabulary where ``vocab`` is known (in-process
    models), else past the wire's int64."""
    top = vocab if vocab is not None else wire.INT64_MAX + 1  # the wire's int64: past it a raw ValidationError
    if ids and (min(ids) < 0 or max(ids) >= top):
        bad = next(t for t in ids if t < 0 or t >= top)
        allowed = f"the vocabulary [0, {vocab})" if vocab is not None else "the token ids (0 to 2**63 - 1)"
        raise ValueError(f"{name}: token {bad} is outside {allowed}")


def no_room(length: int, max_tokens: int, context: int, note: str = "") -> str | None:
    """Why a prompt of ``length`` tokens leaves no room for ``max_tokens`` new ones (``note`` said after them) in the
    model's ``context``, or None when it fits: the one rule of a prompt's room, refused before sending
    (``check_room``) and by the engine."""
    if length + max_tokens <= context:
        return None
    return f"{length} tokens + max_tokens {max_tokens}{note} exceed the model's context of {context}"


def check_room(
    prompts: Sequence[Sequence[int]], max_tokens: int | None, context: int | None, default: int | None
) -> None:
    """``ValueError`` naming the prompt that, with ``max_tokens`` new tokens (None: ``default``, what the sampler
    takes then: the in-process engine's ``wire.DEFAULT_MAX_TOKENS``, a server's from supported-models; None: not
    said, only the prompt itself checked), would not fit the model's ``context`` (``no_room``; known for in-process
    models, and for remote ones whose server lists it in supported-models; None: not checked)."""
    if context is None:
        return
    room = max_tokens if max_tokens is not None else default
    unset = " (the default: max_tokens is unset)" if max_tokens is None else ""
    for i, t in enumerate(prompts):
        if len(t) > context:
            raise ValueError(f"prompts[{i}] has {len(t)} tokens, more than the model's context of {context}")
        why = no_room(len(t), room, context, unset) if room is not None else None
        if why is not None:
            raise ValueError(f"prompts[{i}]: {why}")
