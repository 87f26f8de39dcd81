"""A session's prompts turned into token ids and its token ids back into text, through its codec: a session
without one (a remote one given no ``tokenizer=``) still takes token ids, and names itself when asked for text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from rlnb._input.checks import check_bool
from rlnb.session.backend import Backend
from rlnb.text.codec import Codec, as_prompt, no_tokenizer, to_tokens
from rlnb.text.prompts import check_ids, token_ids


def encode_prompt(codec: Codec | None, prompt: Any, name: str, session_id: str) -> list[int]:
    """Token ids of ``prompt`` (text, chat messages or token ids), named ``name`` in an error."""
    p = as_prompt(prompt, name, codec)
    if isinstance(p, str) or (p and isinstance(p[0], Mapping)):
        return to_tokens(text_codec(codec, session_id), p, name)
    return cast(list[int], p)


def decode_tokens(
    codec: Codec | None, backend: Backend, tokens: Sequence[int], skip_special: bool, session_id: str
) -> str:
    """Text of token ids, each checked against ``backend``'s vocabulary where it knows it."""
    skip_special = check_bool("skip_special", skip_special)  # "no" is truthy: it would leave the EOS out
    ids = token_ids(tokens, "tokens")
    text = text_codec(codec, session_id)
    check_ids(ids, "tokens", getattr(backend, "vocab_size", None))
    return text.decode(ids, skip_special)


def text_codec(codec: Codec | None, session_id: str) -> Codec:
    """``codec``, or the error saying that session ``session_id`` has no tokenizer for text."""
    if codec is None:
        raise no_tokenizer(session_id)
    return codec
