"""Text in and out of token ids: one small interface over a Hugging Face tokenizer or the byte codec.

The built-in models are byte-level (token id = byte value), so they need no tokenizer; a Hugging Face
model brings its own. Everything in rlnb that turns text into tokens or back (``Session.sample`` with
strings, ``samples.from_text``, stop strings, the demo's reward) goes through a ``Codec``, so none of
it asks which kind of model it is talking to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

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
        return bytes(int(t) for t in tokens if 0 <= t < 256).decode("utf-8", errors="replace")

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
        raise ValueError(self.refusal())

    def decode(self, tokens: Sequence[int], skip_special: bool = False) -> str:
        raise ValueError(self.refusal())

    def chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        raise ValueError(self.refusal())


class TokenizerCodec:
    """A Hugging Face tokenizer (``AutoTokenizer``). Encoding adds the tokenizer's special tokens
    (e.g. a BOS) as it would for the model; EOS ids come from the tokenizer and the model's
    generation config."""

    def __init__(self, tokenizer: Any, extra_eos: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer
        ids = [tokenizer.eos_token_id] if getattr(tokenizer, "eos_token_id", None) is not None else []
        self.eos_token_ids = tuple(dict.fromkeys([*ids, *extra_eos]))

    def encode(self, text: str, special: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=special))

    def decode(self, tokens: Sequence[int], skip_special: bool = False) -> str:
        if skip_special:  # an EOS from the generation config need not be a special token of the tokenizer
            tokens = _without_eos(tokens, self.eos_token_ids)
        return str(self.tokenizer.decode([int(t) for t in tokens], skip_special_tokens=skip_special))

    def chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(
                f"{type(self.tokenizer).__name__} has no chat template: pass text (or set tokenizer.chat_template)"
            )
        out = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], add_generation_prompt=add_generation_prompt, tokenize=True
        )
        ids = out["input_ids"] if isinstance(out, Mapping) else out
        return [int(t) for t in ids]


def _without_eos(tokens: Sequence[int], eos: Sequence[int]) -> Sequence[int]:
    """``tokens`` without the EOS that ended them (a sampled sequence stops at its first EOS)."""
    return tokens[:-1] if len(tokens) and int(tokens[-1]) in eos else tokens


def as_codec(obj: Any) -> Codec:
    """A Codec from a Codec, anything with a ``codec`` (a Session), a Hugging Face tokenizer, or None (bytes)."""
    if obj is None:
        return ByteCodec()
    if isinstance(obj, ByteCodec | NoTokenizerCodec | TokenizerCodec):
        return obj
    codec = getattr(obj, "codec", None)
    if codec is not None:
        return codec
    if callable(getattr(obj, "encode", None)) and callable(getattr(obj, "decode", None)):
        return TokenizerCodec(obj)
    raise TypeError(f"expected a tokenizer, a Session or a Codec, got {type(obj).__name__}")


def to_tokens(codec: Codec, prompt: str | Sequence[int] | Sequence[Message]) -> list[int]:
    """Token ids of a prompt given as text, as token ids, or as chat messages (with the generation prompt)."""
    if isinstance(prompt, str):
        return codec.encode(prompt)
    items: list[Any] = list(prompt)
    if items and all(isinstance(m, Mapping) for m in items):
        return codec.chat(items, add_generation_prompt=True)
    if all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        return [int(t) for t in items]
    raise TypeError("a prompt is a string, a list of token ids, or a list of chat messages ({'role', 'content'})")


class StopMatcher:
    """Stop strings matched incrementally, one sequence at a time.

    Decoding a whole sequence at every token costs O(length) per token. This keeps, per sequence, only
    the text decoded so far and a small window of tokens whose text may still change (a multi-byte
    character split across tokens decodes to U+FFFD until it is complete — the prefix-offset scheme
    of vLLM and TGI). Each new token costs one decode of that window, and the search looks only at
    the tail where a stop string could have just appeared.
    """

    def __init__(self, codec: Codec, stop: Sequence[str]) -> None:
        self.codec = codec
        self.stop = [s for s in stop if s]
        self.longest = max((len(s) for s in self.stop), default=0)
        self.tokens: list[int] = []
        self.text = ""
        self._prefix = 0  # tokens[_prefix:_read] were decoded last time, as context for the next token
        self._read = 0

    def push(self, token: int) -> bool:
        """Add one token; True when a stop string now appears in the text."""
        self.tokens.append(token)
        before = self.codec.decode(self.tokens[self._prefix : self._read])
        now = self.codec.decode(self.tokens[self._prefix :])
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return False  # an incomplete character: wait for the rest of its bytes
        new = now[len(before) :]
        self._prefix, self._read = self._read, len(self.tokens)
        tail_start = max(0, len(self.text) - self.longest + 1)
        self.text += new
        tail = self.text[tail_start:]
        return any(s in tail for s in self.stop)
