"""Text in and out of token ids: one small interface over a Hugging Face tokenizer or the byte codec.

The built-in models are byte-level (token id = byte value), so they need no tokenizer; a Hugging Face
model brings its own. Everything in rlnb that turns text into tokens or back (``Session.sample`` with
strings, ``samples.from_text``, stop strings, the demo's reward) goes through a ``Codec``, so none of
it asks which kind of model it is talking to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, Protocol, cast, runtime_checkable

from rlnb._input.checks import is_integer
from rlnb._input.shown import shown
from rlnb.text.chat_fields import nones, refusal, rendered, renders_as_transformers
from rlnb.text.prompts import SHOWN, a_type, check_messages, check_text
from rlnb.wire.lists import only

Message = Mapping[str, str]
"""A chat message, ``{"role": "user", "content": "..."}``."""


@runtime_checkable
class Codec(Protocol):
    tokenizer: Any
    """The Hugging Face tokenizer behind this codec, or None (bytes)."""
    eos_token_ids: tuple[int, ...]
    """Tokens that end a sampled sequence."""

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Token ids; ``special`` adds the tokenizer's special tokens (e.g. BOS) as for a whole input."""
        ...

    def decode(self, tokens: Sequence[int], skip_special: bool = False) -> str:
        """Text of ``tokens``; ``skip_special`` leaves out a final EOS and the tokenizer's special tokens
        (what a reward reads: the completion's text, as TRL decodes it)."""
        ...

    def chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]: ...


class TemplateRefused(ValueError):
    """A chat template's own refusal of the messages (its ``raise_exception(...)``), or a tokenizer without one, as a
    ``ValueError``."""


class NoTokenizer(ValueError):
    """Text asked of a model that has no tokenizer (``NoTokenizerCodec``, ``no_tokenizer``): a type of its own, so a
    caller that knows which prompt asked (a task's check) names it, without reading the message's words."""


class ByteCodec:
    """UTF-8 bytes as token ids 0..255 (the built-in models). No chat template, no EOS."""

    tokenizer = None

    def __init__(self, eos_token_ids: Sequence[int] = ()) -> None:
        self.eos_token_ids = tuple(eos_token_ids)

    def encode(self, text: str, special: bool = True) -> list[int]:
        return list(text.encode())

    def decode(self, tokens: Sequence[int], skip_special: bool = False) -> str:
        if skip_special:
            tokens = _without_eos(tokens, self.eos_token_ids)
        runs = _known_runs(tokens, 256)  # a custom model's vocabulary may be larger than the bytes
        if len(runs) == 1 and (only := runs[0]) is not None:  # every id a byte: its text, with no call a run
            return bytes(only).decode("utf-8", errors="replace")
        return "".join(UNKNOWN if r is None else bytes(r).decode("utf-8", errors="replace") for r in runs)

    def chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        raise ValueError("chat messages need a tokenizer with a chat template; the byte-level model has none")


class NoTokenizerCodec:
    """Token ids only: a Hugging Face model that came without a tokenizer. Text in or out is an error
    that says so (the byte codec would feed raw bytes to a vocabulary that is not bytes)."""

    tokenizer = None

    def __init__(self, model: str, eos_token_ids: Sequence[int] = ()) -> None:
        self.model = model
        self.eos_token_ids = tuple(eos_token_ids)

    def refusal(self) -> str:
        return f"model {self.model!r} has no tokenizer: pass tokenizer= to rlnb.connect to use text, or pass token ids"

    def encode(self, text: str, special: bool = True) -> list[int]:
        raise NoTokenizer(self.refusal())

    def decode(self, tokens: Sequence[int], skip_special: bool = False) -> str:
        raise NoTokenizer(self.refusal())

    def chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        raise NoTokenizer(self.refusal())


class TokenizerCodec:
    """A Hugging Face tokenizer (``AutoTokenizer``). Encoding adds the tokenizer's special tokens
    (e.g. a BOS) as it would for the model; EOS ids come from the tokenizer and the model's
    generation config."""

    def __init__(self, tokenizer: Any, extra_eos: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer
        ids = [tokenizer.eos_token_id] if getattr(tokenizer, "eos_token_id", None) is not None else []
        self.eos_token_ids = tuple(dict.fromkeys([*ids, *extra_eos]))
        self.size: int | None = len(tokenizer) if hasattr(tokenizer, "__len__") else None
        """Tokens the tokenizer knows, added ones included (a slow tokenizer's ``len`` builds its vocabulary)."""

    def encode(self, text: str, special: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=special))

    def decode(self, tokens: Sequence[int], skip_special: bool = False) -> str:
        if skip_special:  # an EOS from the generation config need not be a special token of the tokenizer
            tokens = _without_eos(tokens, self.eos_token_ids)
        # A model's rows past the tokenizer (a padded vocabulary): a fast tokenizer drops them, a slow one raises
        runs = _known_runs(tokens, self.size)
        return "".join(
            UNKNOWN if r is None else str(self.tokenizer.decode(r, skip_special_tokens=skip_special)) for r in runs
        )

    def chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise TemplateRefused(  # a TemplateRefused: ``to_tokens`` names the prompt of the batch
                f"the tokenizer ({type(self.tokenizer).__name__}) has no chat template: pass text (or set "
                "tokenizer.chat_template)"
            )
        check_messages(messages)
        listed = [dict(m) for m in messages]
        try:  # transformers' render, by rlnb: what it raises, transformers' raises
            done = rendered(self.tokenizer, listed, add_generation_prompt)
        except Exception as exc:
            raise TemplateRefused(refusal(exc, listed)[:500]) from exc
        text = done.text if done is not None and renders_as_transformers(self.tokenizer) else None
        if done is None or (not done.missing and text is None):
            try:
                out = self.tokenizer.apply_chat_template(listed, add_generation_prompt=add_generation_prompt,
                                                         tokenize=True)  # fmt: skip
            except Exception as exc:  # a tokenizer's own render: its error is its refusal, in its words
                said = " ".join(str(exc).split())
                raise TemplateRefused(f"the chat template refused these messages: {said}"[:500]) from exc
        if done is not None and done.missing:
            name = getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__
            raise TemplateRefused(
                f"the chat template of {name!r} prints a value these messages do not give ({done.missing}), which "
                f"transformers would print as nothing{nones(listed)}: "
                "give it, or make the template test it first ({% if ... is defined %})"[:500]
            )
        if text is not None:  # the text rendered once, as transformers renders it: its tokens
            out = self.tokenizer(text, padding=False, truncation=False, max_length=None, add_special_tokens=False)
        ids = out["input_ids"] if isinstance(out, Mapping) else out
        return [int(t) for t in ids]


def decode_all(codec: Codec, sequences: Sequence[Sequence[int]], skip_special: bool = False) -> list[str]:
    """``codec.decode(s, skip_special)`` of each of ``sequences``, the same texts, with no Python call a sequence when
    every id is a known int: bytes decoded in one loop, a tokenizer's ``batch_decode`` (a step's completions, each a
    reward reads, cost 3 calls each through ``decode``). Anything else goes through ``decode``, its errors its own."""
    size: int | None = 256
    batch = None
    if isinstance(codec, TokenizerCodec):
        size, batch = codec.size, getattr(codec.tokenizer, "batch_decode", None)
    eos = codec.eos_token_ids if skip_special else ()
    ids = [s[:-1] if s and s[-1] in eos else s for s in map(list, sequences)]
    flat = list(chain.from_iterable(ids))
    known = only(flat, int) and (not flat or (min(flat) >= 0 and (size is None or max(flat) < size)))
    if known and isinstance(codec, ByteCodec):
        return [bytes(s).decode("utf-8", errors="replace") for s in ids]
    if known and ids and isinstance(codec, TokenizerCodec) and callable(batch):
        return list(map(str, batch(ids, skip_special_tokens=skip_special)))
    return [codec.decode(s, skip_special) for s in sequences]


def _known_runs(tokens: Sequence[int], size: int | None) -> list[list[int] | None]:
    """``tokens`` as runs of ids in ``[0, size)``, each id outside it a None between them (one run when all are
    known, found at C speed)."""
    ids = list(map(int, tokens))
    if size is None or not ids or (min(ids) >= 0 and max(ids) < size):
        return [ids]
    runs: list[list[int] | None] = [[]]
    for t in ids:
        if 0 <= t < size:
            last = runs[-1]
            if last is None:
                runs.append([t])
            else:
                last.append(t)
        else:
            runs.append(None)
    return runs


UNKNOWN = "\ufffd"
"""How ``decode`` shows an id its tokenizer has no token for (a padded vocabulary's spare rows, a custom
model's ids past 255 under the byte codec): U+FFFD, as an invalid byte shows, never nothing."""


def _without_eos(tokens: Sequence[int], eos: Sequence[int]) -> Sequence[int]:
    """``tokens`` without the EOS that ended them (a sampled sequence stops at its first EOS)."""
    return tokens[:-1] if len(tokens) and int(tokens[-1]) in eos else tokens


def no_tokenizer(session_id: str) -> NoTokenizer:
    """The error for text asked of a session that has no tokenizer (a remote one without ``tokenizer=``)."""
    return NoTokenizer(
        f"session {session_id} has no tokenizer: pass tokenizer= to rlnb.connect to use text, or pass token ids"
    )


def as_codec(obj: Any) -> Codec:
    """A Codec from a Codec, anything with a ``codec`` (a Session), a Hugging Face tokenizer, or None (bytes)."""
    if obj is None:
        return ByteCodec()
    if isinstance(obj, ByteCodec | NoTokenizerCodec | TokenizerCodec):
        return obj
    if hasattr(obj, "codec"):  # a Session: its codec (it has encode and decode too, but is no tokenizer)
        if obj.codec is None:
            raise no_tokenizer(getattr(obj, "id", "?"))
        return cast(Codec, obj.codec)
    if callable(getattr(obj, "encode", None)) and callable(getattr(obj, "decode", None)):
        return TokenizerCodec(obj)
    hint = ": load a folder or hub id with transformers.AutoTokenizer.from_pretrained" if isinstance(obj, str) else ""
    raise TypeError(  # it named no argument; the samples helpers' is ``tokenizer``
        f"tokenizer must be a Session, a Hugging Face tokenizer (with encode and decode) or None (bytes), got "
        f"{a_type(obj)}{hint}"
    )


def as_prompt(prompt: Any, name: str = "prompt", codec: Codec | None = None) -> str | list[int] | list[Message]:
    """One prompt as text, a list of token ids or a list of chat messages: an array, tensor or iterator of ids
    is listed (once); bytes are ids for ``codec`` a ``ByteCodec`` only; anything else is a ``TypeError`` naming
    ``name``."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, bytes | bytearray) and not isinstance(codec, ByteCodec):
        raise TypeError(  # b"hi" would be the ids 104, 105 of a vocabulary that is not bytes
            f"{name} is bytes, which are token ids only for a byte-level model: pass text (b.decode()) or a list "
            "of token ids"
        )
    if isinstance(prompt, Mapping):
        raise TypeError(f"{name} is one chat message: a chat prompt is a list of messages, [message]")
    if hasattr(prompt, "tolist"):  # numpy, torch
        prompt = prompt.tolist()
    if isinstance(prompt, Sequence | Iterator):
        items: list[Any] = list(prompt)
        if items and all(isinstance(m, Mapping) for m in items):
            check_messages(items, name)
            return items
        if only(items, int):  # the common case, with no Python step per id
            return items
        if all(is_integer(t) for t in items):
            return [int(t) for t in items]
        bad = next(t for t in items if not is_integer(t))
        raise TypeError(
            f"{name} must be a string, a list of token ids, or a list of chat messages ({{'role', 'content'}}); "
            f"it holds {shown(bad, SHOWN)}"[:300]
        )
    raise TypeError(f"{name} must be a string, a list of token ids, or a list of chat messages, got {a_type(prompt)}")


def to_tokens(codec: Codec, prompt: str | Sequence[int] | Sequence[Message], name: str = "prompt") -> list[int]:
    """Token ids of a prompt given as text, as token ids, or as chat messages (with the generation prompt)."""
    p = as_prompt(prompt, name, codec)
    if isinstance(p, str):
        check_text(p, name)
        return codec.encode(p)
    if p and isinstance(p[0], Mapping):
        try:
            return codec.chat(p, add_generation_prompt=True)
        except TemplateRefused as exc:  # which prompt of a batch
            raise TemplateRefused(f"{name}: {exc}") from exc.__cause__
    return cast(list[int], p)
