"""LoRA adapters for the in-process backend (Hu et al. 2021, arXiv 2106.09685).

A LoRA session freezes the model's weights and trains a low-rank update on every linear layer:
``y = W x + (alpha / rank) · B A dropout(x)``, with ``A`` (rank × in) initialised like PEFT
(Kaiming-uniform) and ``B`` (out × rank) at zero, so the adapted model starts equal to the base.
The output head gets an adapter only with ``train_unembed`` (the API's documented default: true).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

DEFAULT_RANK = 8
DEFAULT_ALPHA = 16
DEFAULT_DROPOUT = 0.0
"""The service's R-Apr defaults were rank 8, alpha 16, dropout 0.05; rlnb uses no dropout by default so
that a LoRA step is deterministic."""


@dataclass(frozen=True)
class LoraSettings:
    rank: int = DEFAULT_RANK
    alpha: int = DEFAULT_ALPHA
    dropout: float = DEFAULT_DROPOUT
    seed: int = 0
    train_unembed: bool = True

    @classmethod
    def from_config(cls, config: dict[str, Any] | bool) -> LoraSettings:
        """From a wire ``LoraConfig`` dict (unset fields take the defaults) or ``True``."""
        if not isinstance(config, dict):
            return cls()
        given = {k: v for k, v in dict(config).items() if v is not None}
        unknown = set(given) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown LoRA fields {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}")
        settings = cls(**given)
        if settings.rank < 1 or settings.alpha < 1 or not 0 <= settings.dropout < 1:
            raise ValueError(f"LoRA needs rank >= 1, alpha >= 1 and dropout in [0, 1), got {settings}")
        return settings


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update."""

    def __init__(self, base: nn.Linear, s: LoraSettings, generator: torch.Generator):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.scale = s.alpha / s.rank
        a = torch.empty(s.rank, base.in_features)
        bound = 1 / math.sqrt(base.in_features)  # kaiming_uniform_(a=sqrt(5)), as nn.Linear and PEFT
        a.uniform_(-bound, bound, generator=generator)
        self.lora_A = nn.Parameter(a.to(base.weight.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, s.rank, device=base.weight.device))
        self.dropout = nn.Dropout(s.dropout) if s.dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (self.dropout(x) @ self.lora_A.T @ self.lora_B.T) * self.scale

    def merged_weight(self) -> torch.Tensor:
        return self.base.weight + self.scale * (self.lora_B @ self.lora_A)


def apply_lora(model: nn.Module, settings: LoraSettings, head: nn.Module | None = None) -> list[str]:
    """Freeze ``model`` and wrap its linear layers with adapters, in place. ``head`` (the output
    projection) is adapted only with ``train_unembed``. Returns the adapted layers' names."""
    model.requires_grad_(False)
    generator = torch.Generator().manual_seed(settings.seed)
    targets = [
        (name, mod)
        for name, mod in model.named_modules()
        if isinstance(mod, nn.Linear) and (settings.train_unembed or mod is not head)
    ]
    for name, mod in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(mod, settings, generator))
    return [name for name, _ in targets]


def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The plain model's state dict with every adapter folded into its base weight."""
    out: dict[str, torch.Tensor] = {}
    lora_prefixes = {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    for key, value in model.state_dict().items():
        prefix = next((p for p in lora_prefixes if key.startswith(p + ".")), None)
        if prefix is None:
            out[key] = value.detach().clone()
            continue
        rest = key[len(prefix) + 1 :]
        if rest == "base.weight":
            out[f"{prefix}.weight"] = lora_prefixes[prefix].merged_weight().detach().clone()
        elif rest.startswith("base."):
            out[f"{prefix}.{rest.removeprefix('base.')}"] = value.detach().clone()
    return out


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapter weights (``lora_A`` / ``lora_B`` of every adapted layer)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if ".lora_A" in k or ".lora_B" in k}
