"""Stop strings found as the engine samples, token by token (``StopMatcher``): the text of a sequence kept as it
grows, through its ``Codec``, so each new token costs one small decode, not the whole sequence's."""

from __future__ import annotations

from collections.abc import Sequence

from rlnb.text.codec import Codec


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
        if len(now) <= len(before):
            return False
        if now.endswith("\ufffd"):  # an incomplete character: keep nothing until the rest of its bytes come, but
            whole = now.rstrip("\ufffd")  # what is whole before it may end a stop string (a last token's "!" + 0xC3)
            return len(whole) > len(before) and self._found(whole[len(before) :])
        new = now[len(before) :]
        self._prefix, self._read = self._read, len(self.tokens)
        found = self._found(new)
        self.text += new
        return found

    def _found(self, new: str) -> bool:
        """Whether a stop string appears in the text with ``new`` after it: only its tail can hold a new one."""
        tail = self.text[max(0, len(self.text) - self.longest + 1) :] + new
        return any(s in tail for s in self.stop)
