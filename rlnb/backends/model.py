"""The built-in tiny causal transformer: a byte-level GPT small enough to train on a laptop CPU.

After nanoGPT (github.com/karpathy/nanoGPT, model.py), cut down to what the local backend needs:
pre-norm blocks, fused causal attention, learned positions, GPT-2 initialisation. Two departures:

* No dropout. RL compares the log-probs a sampler saw with those the trainer recomputes; dropout would
  make the same weights give different log-probs in the two places.
* The output head is *not* tied to the token embedding, so the Muon split (``optim.split_params``) can
  give each its own treatment and a checkpoint holds no shared tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

GPT2_INIT_STD = 0.02
"""Std of the normal init for all weights (GPT-2, Radford et al. 2019; nanoGPT ``_init_weights``)."""


@dataclass
class TinyConfig:
    vocab_size: int = 256  # byte-level: token id = byte value, so the demo and tests need no tokenizer
    block_size: int = 64  # longest sequence (prompt + completion) the model sees
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64  # must be divisible by n_head
    bias: bool = True  # biases in Linear layers and LayerNorms, as GPT-2


SIZES: dict[str, TinyConfig] = {
    "tiny": TinyConfig(),  # ~137k params: the whole test suite trains it in seconds
    "small": TinyConfig(n_layer=4, n_embd=128),  # ~867k params: for demos that should visibly learn
}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble heads side by side
        return self.c_proj(y)


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

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
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

    def forward(self, idx: Tensor) -> Tensor:
        """Logits ``[T, V]`` for ``idx`` ``[T]``, or ``[B, T, V]`` for ``[B, T]``."""
        if idx.ndim not in (1, 2):
            raise ValueError(f"idx must be [T] or [B, T], got shape {tuple(idx.shape)}")
        T = idx.shape[-1]
        if not 0 < T <= self.config.block_size:
            raise ValueError(f"sequence length {T} must be in [1, block_size={self.config.block_size}]")
        x2d = idx.view(-1, T)  # (B, T); B = 1 for a lone sequence
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.wte(x2d) + self.wpe(pos)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        return logits.view(*idx.shape, -1)


def build_model(size: str | TinyConfig, seed: int) -> TinyTransformer:
    """A freshly initialised model; the same ``seed`` always gives bit-identical weights.

    The init runs under ``torch.random.fork_rng`` so seeding it leaves the caller's global RNG as it was.
    """
    if isinstance(size, str):
        if size not in SIZES:
            raise ValueError(f"unknown model size {size!r}; choose one of {sorted(SIZES)}")
        size = SIZES[size]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyTransformer(size)
