"""The built-in tiny causal transformer: a byte-level GPT small enough to train on a laptop CPU.

After nanoGPT (github.com/karpathy/nanoGPT, model.py), cut down to what the local backend needs:
pre-norm blocks, fused causal attention, learned positions, GPT-2 initialisation, plus a key/value
cache for incremental decoding of left-padded batches (``KVCache``). Two departures:

* No dropout. RL compares the log-probs a sampler saw with those the trainer recomputes; dropout would
  make the same weights give different log-probs in the two places.
* The output head is *not* tied to the token embedding, so the Muon split (``optim.split_params``) can
  give each its own treatment and a checkpoint holds no shared tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlnb.engine.models.seeding import seeded

GPT2_INIT_STD = 0.02
"""Std of the normal init for all weights (GPT-2, Radford et al. 2019; nanoGPT ``_init_weights``)."""


@dataclass
class TinyConfig:
    vocab_size: int = 256  # byte-level: token id = byte value, so the demo and tests need no tokenizer
    block_size: int = 256  # longest sequence (prompt + completion): room for real-length completions
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64  # must be divisible by n_head
    bias: bool = True  # biases in Linear layers and LayerNorms, as GPT-2


SIZES: dict[str, TinyConfig] = {
    "tiny": TinyConfig(),  # ~150k params: the whole test suite trains it in seconds
    "small": TinyConfig(n_layer=4, n_embd=128),  # ~892k params: for demos that should visibly learn
}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attention: Callable[..., Tensor] = F.scaled_dot_product_attention
        """The attention kernel; a stacked model (``rlnb.batched.stacked``) swaps in one that vmap batches."""

    def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        """``mask`` (B, 1, T, S) says which of the S keys each query may see (None: plain causal over T);
        with ``cache`` the new keys/values are written at slots [cache.length, cache.length + T)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        # (B, nh, T, hs) each, one by one: a generator over the three would be 4 Python calls a layer
        heads = (B, T, self.n_head, C // self.n_head)
        q, k, v = q.view(heads).transpose(1, 2), k.view(heads).transpose(1, 2), v.view(heads).transpose(1, 2)
        if cache is not None:
            k, v = cache.write(layer, k, v)  # (B, nh, S, hs), S = cached + T
        y = self.attention(q, k, v, attn_mask=mask, is_causal=mask is None)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble heads side by side
        return self.c_proj(y)

    def step(self, x: Tensor, mask: Tensor, cache: KVCache, layer: int) -> Tensor:
        """``forward`` of one token per row, ``x`` ``(B, C)``, written at ``cache.slot``: with one query the heads
        are views of the projection (no transposes, no copy), and so is the re-assembled output."""
        B, C = x.shape
        q, k, v = self.c_attn(x).view(B, 3, self.n_head, 1, C // self.n_head).unbind(1)  # (B, nh, 1, hs) each
        k, v = cache.write(layer, k, v)  # (B, nh, S, hs)
        attention = one_query_attention if cache.compiled else self.attention
        return self.c_proj(attention(q, k, v, attn_mask=mask).reshape(B, C))


def one_query_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor, is_causal: bool = False) -> Tensor:
    """Attention of one query per row, ``softmax(q·kᵀ/√d + mask)·v``, as products and sums: a compiler fuses them
    into a few loops, where CPU's fused attention kernel is slow for a single query."""
    scores = (q * k).sum(-1) * q.shape[-1] ** -0.5  # (B, nh, S)
    weights = torch.softmax(scores.masked_fill(~attn_mask[:, :, 0], float("-inf")), dim=-1)
    return (weights[..., None] * v).sum(-2, keepdim=True)  # (B, nh, 1, hs)


class MLP(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        x = x + self.attn(self.ln_1(x), mask, cache, layer)
        return x + self.mlp(self.ln_2(x))

    def step(self, x: Tensor, mask: Tensor, cache: KVCache, layer: int) -> Tensor:
        """``forward`` of one token per row, ``x`` ``(B, C)`` (``CausalSelfAttention.step``)."""
        x = x + self.attn.step(self.ln_1(x), mask, cache, layer)
        return x + self.mlp(self.ln_2(x))


class TinyTransformer(nn.Module):
    """Decoder-only transformer mapping token ids ``[T]`` or ``[B, T]`` to next-token logits."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd ({config.n_embd}) must be divisible by n_head ({config.n_head})")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

        # GPT-2 init: N(0, 0.02) everywhere, zero biases, and the projections that write into the
        # residual stream scaled by 1/sqrt(2 * n_layer), so the stream's variance does not grow with
        # depth (each block adds two such writes).
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=GPT2_INIT_STD / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=GPT2_INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(
        self, idx: Tensor, attention_mask: Tensor | None = None, cache: KVCache | None = None, last: bool = False
    ) -> Tensor:
        """Logits ``[T, V]`` for ``idx`` ``[T]``, or ``[B, T, V]`` for ``[B, T]``; with ``last``, the last position's
        alone, ``[V]`` or ``[B, V]`` (a prefill's next token: the final norm and the head over one position a row; the
        same values to float32's rounding, MKL's product of fewer rows may round a row otherwise).

        Plain calls treat every row as one sequence starting at position 0 (right padding is harmless
        under causal attention). For left-padded batches pass ``attention_mask`` ``[B, S]`` (1 = real
        token) covering the cached tokens and ``idx``: positions count real tokens only, and no query
        sees a pad. With ``cache`` the call appends ``idx`` to it (prefill, then one token per step).
        """
        if idx.ndim not in (1, 2):
            raise ValueError(f"idx must be [T] or [B, T], got shape {tuple(idx.shape)}")
        T = idx.shape[-1]
        past = cache.length if cache is not None else 0
        if not 0 < past + T <= self.config.block_size:
            raise ValueError(f"sequence length {past + T} must be in [1, block_size={self.config.block_size}]")
        x2d = idx.view(-1, T)  # (B, T); B = 1 for a lone sequence
        mask = None
        if attention_mask is None:
            pos = torch.arange(past, past + T, device=idx.device)  # (T,)
            if past:  # a cached step: causal over all S = past + T slots
                mask = _attention_mask(torch.ones(x2d.shape[0], past + T, device=idx.device), past)
        else:
            pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, past:]  # (B, T): real tokens before each slot
            mask = _attention_mask(attention_mask, past)
        x = self.wte(x2d) + self.wpe(pos)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, cache, i)
        if cache is not None:
            cache.length += T
        if last:
            return self.lm_head(self.ln_f(x[:, -1])).view(*idx.shape[:-1], -1)  # (B, V)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        return logits.view(*idx.shape, -1)

    def decode_step(self, tokens: Tensor, pos: Tensor, slot: Tensor, cache: KVCache) -> Tensor:
        """Logits ``[B, V]`` after one new token per row, ``tokens`` ``[B]`` at positions ``pos`` ``[B]``, written at
        cache slot ``slot`` (a 1-element tensor): a static-shape step (see ``KVCache``). A query sees the real
        slots up to its own, among the first ``cache.end`` (None: all). It advances ``pos`` and ``slot`` in place
        for the next step: inside a compiled graph those adds cost no dispatch of their own."""
        if cache.compiled or cache.end is None:  # a fixed number of slots, some still empty: those past ``slot`` hidden
            end = cache.real.shape[1] if cache.end is None else cache.end
            slots = torch.arange(end, device=tokens.device)
            mask = (cache.real[:, :end] & (slots <= slot))[:, None, None, :]  # (B, 1, 1, end)
        else:  # the filled slots only: the prefill's additive mask (``KVCache.fill``), a view
            mask = cache.bias[..., : cache.end]
        cache.slot = slot
        x = self.wte(tokens) + self.wpe(pos)  # (B, C)
        for i, block in enumerate(self.blocks):
            x = cast(Block, block).step(x, mask, cache, i)  # a ModuleList yields Modules
        cache.slot = None
        pos.add_(1)
        slot.add_(1)
        return self.lm_head(self.ln_f(x))


def _attention_mask(attention_mask: Tensor, past: int) -> Tensor:
    """(B, 1, T, S) booleans: query slot ``past + t`` sees key slot ``s`` iff ``s <= past + t`` and ``s`` is a
    real token. A pad query also sees itself, so that no row is fully masked (SDPA would return NaN)."""
    S = attention_mask.shape[-1]
    slots = torch.arange(S, device=attention_mask.device)
    queries = slots[past:, None]  # (T, 1)
    causal = slots[None, :] <= queries  # (T, S)
    real = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    return causal & (real | (slots[None, :] == queries))


class KVCache:
    """Keys and values of every layer for incremental decoding, preallocated (zeroed) for ``max_len`` slots,
    one tensor per layer (a compiled step then writes each in place, never a copy of the whole cache).

    Two ways to write. A plain call (``slot`` None) appends its T new keys/values at ``length`` and attends
    over the filled slots. A static step (``slot`` a 1-element tensor, see ``TinyTransformer.decode_step``)
    writes one token at that slot and attends over the first ``end`` slots (None: all ``max_len``), the mask
    hiding those past it: every shape is fixed by the cache and ``end``, so one compiled step (``torch.compile``)
    serves every step of a window (``compiled.window``). ``real`` ``[B, max_len]`` marks the slots that hold real
    tokens (not left padding). A plain call with ``shared`` n writes each of its rows into n consecutive rows (a
    prompt prefilled once for its n samples) and attends over its own. A ``compiled`` cache's static steps attend
    with ``one_query_attention`` (plain ops that fuse, slower than the fused kernel eagerly). An eager step's ``end``
    is the filled slots (``BuiltinDecoder`` sets it): attention over all 202 slots of a 16 x 200 sample was 40% of
    the eager step on ``small``."""

    def __init__(
        self,
        config: TinyConfig,
        batch: int,
        max_len: int,
        device: torch.device,
        dtype: torch.dtype,
        compiled: bool = False,
    ) -> None:
        hs = config.n_embd // config.n_head
        shape = (batch, config.n_head, max_len, hs)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.real = torch.ones(batch, max_len, dtype=torch.bool, device=device)
        self.bias = torch.zeros(batch, 1, 1, max_len, device=device, dtype=dtype)
        """``real`` as SDPA's additive mask (0 or -inf, what SDPA makes of a boolean mask at every call), for the
        eager steps: set once by ``fill``, sliced to the filled slots at each step."""
        self.length, self.shared = 0, 1
        self.slot: Tensor | None = None
        self.end: int | None = None
        self.compiled = compiled

    @classmethod
    def over(cls, k: Tensor, v: Tensor, length: int) -> KVCache:
        """A cache over existing keys/values ``[n_layer, B, nh, max_len, hs]`` of which ``length`` slots are
        filled: how a stacked model hands each member its slice of one cache inside ``torch.func.vmap``."""
        cache = cls.__new__(cls)
        cache.k, cache.v, cache.length, cache.shared = list(k.unbind(0)), list(v.unbind(0)), length, 1
        cache.slot, cache.end, cache.compiled = None, None, False
        return cache

    def fill(self, mask: Tensor) -> None:
        """Mark the prompts' slots ``[:T]`` real where ``mask`` ``[B, T]`` is 1 (left padding: 0)."""
        self.real[:, : mask.shape[1]] = mask.bool()
        self.bias.zero_().masked_fill_(~self.real[:, None, None, :], -math.inf)

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new (B, nh, T, hs) keys/values (see the class docstring); return those to attend over."""
        keys, values = self.k[layer], self.v[layer]
        if self.slot is not None:
            keys.index_copy_(2, self.slot, k)
            values.index_copy_(2, self.slot, v)
            return (keys, values) if self.end is None else (keys[:, :, : self.end], values[:, :, : self.end])
        end, n = self.length + k.shape[2], self.shared
        if n > 1:  # each row into its n rows; attended over once (a strided view: vmap copies it, a step must not)
            keys.unflatten(0, (-1, n))[:, :, :, self.length : end] = k[:, None]
            values.unflatten(0, (-1, n))[:, :, :, self.length : end] = v[:, None]
            return keys[::n, :, :end], values[::n, :, :end]
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        return keys[:, :, :end], values[:, :, :end]


def build_model(size: str | TinyConfig, seed: int) -> TinyTransformer:
    """A freshly initialised model; the same ``seed`` always gives bit-identical weights.

    The init runs under ``seeding.seeded``, so seeding it leaves the caller's global RNG as it was, and a model
    built at once on another thread draws nothing in between.
    """
    if isinstance(size, str):
        if size not in SIZES:
            raise ValueError(f"unknown model size {size!r}; choose one of {sorted(SIZES)}")
        size = SIZES[size]
    with seeded(seed):
        return TinyTransformer(size)
