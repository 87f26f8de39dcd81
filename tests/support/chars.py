"""Chars: a stand-in tokenizer (one token per UTF-8 byte) for tests of text prompts without a real one."""

from __future__ import annotations


class Chars:
    """A stand-in tokenizer: one token per UTF-8 byte, + 256 for BOS, and a chat template that renders
    ``role: content``."""

    chat_template = "{{ messages }}"
    eos_token_id = 257

    def __len__(self) -> int:
        return 258

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [256] * add_special_tokens + list(text.encode())

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return bytes(i for i in ids if i < 256).decode(errors="replace")  # as a fast tokenizer: unknown ids dropped

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = True) -> list[int]:
        text = "".join(f"{m['role']}: {m.get('content')}\n" for m in messages)
        return self.encode(text + ("assistant:" if add_generation_prompt else ""))
