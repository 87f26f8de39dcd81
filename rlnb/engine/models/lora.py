"""LoRA through peft (Hu et al. 2021, arXiv 2106.09685) for every kind of model the backend holds.

A LoRA session freezes the model and trains ``y = W x + (alpha / rank) · B A dropout(x)`` on every
linear layer (``ModelAdapter.lora_targets``); the output head gets an adapter only with
``train_unembed`` (the API's documented default: true). peft initialises ``A`` Kaiming-uniform and
``B`` at zero, so the adapted model starts equal to the base; ``seed`` seeds that draw (sessions of one
resource share their base weights exactly) and the session's own dropout generator: LoRA's dropout draws
from it, never from torch's global RNG (shared by every session and library of the process), and a training
checkpoint saves its state, so a resumed run draws the masks of the run that never stopped.

Checkpoints export the adapter in peft's own format (``adapter_config.json`` +
``adapter_model.safetensors``, loadable with ``PeftModel.from_pretrained``) and the merged weights
``W + (alpha / rank) · B A``, computed without touching the live base weights.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from rlnb import wire
from rlnb._extras import need
from rlnb.engine.models.seeding import seeded
from rlnb.errors import OptionRefused

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
    def from_config(cls, config: Mapping[str, Any] | wire.LoraConfig | bool) -> LoraSettings:
        """From a wire ``LoraConfig`` (or its dict; unset fields take the defaults) or ``True``."""
        if isinstance(config, bool):
            return cls()
        given = {k: v for k, v in dict(config).items() if v is not None}
        unknown = set(given) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown LoRA fields {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}")
        settings = cls(**given)
        if settings.rank < 1 or settings.alpha < 1 or not 0 <= settings.dropout < 1:
            raise ValueError(f"LoRA needs rank >= 1, alpha >= 1 and dropout in [0, 1), got {settings}")
        return settings

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _peft() -> Any:
    return need("peft", "hf", "a LoRA session")


def apply_lora(model: nn.Module, targets: list[str], settings: LoraSettings) -> nn.Module:
    """Freeze ``model`` and wrap the named layers with LoRA adapters; returns the peft model.

    The adapter init draws from the global RNG inside ``seeding.seeded``, seeded with ``settings.seed``, so it
    is reproducible, whatever other thread builds a model meanwhile, and leaves the caller's RNG as it was. What it
    cannot adapt (no target, a rank no layer can use, a layer peft refuses) is the refusal of ``lora=``
    (``OptionRefused``)."""
    peft = _peft()
    refuse_adapted(model)
    # nn.MultiheadAttention multiplies by its out_proj's weight itself, never calling the layer: an adapter there
    # never trained (its factors sat at their init, silently)
    targets = [t for t in targets if not isinstance(model.get_submodule(t.rpartition(".")[0]), nn.MultiheadAttention)]
    if not targets:  # peft's NoMatchingPeftModuleError spoke of target_modules, which rlnb chooses
        raise OptionRefused(
            "lora",
            f"lora: model ({type(model).__name__}) has no linear layer for LoRA to adapt (it adapts nn.Linear and "
            "GPT-2's Conv1D layers, outside nn.MultiheadAttention): train all its weights (lora=None), or give it "
            "linear layers",
        )
    usable = max(min(model.get_parameter(f"{t}.weight").shape) for t in targets)  # a rank of B·A is at most that
    if settings.rank > usable:  # more adds weights, not capacity: lora={"rank": 10**8} asked peft for ~1e11 floats
        raise OptionRefused(
            "lora",
            f"lora: rank {settings.rank} is more than any adapted layer can use (B·A has at most the rank of a "
            f"layer's smaller dimension: {usable} in this model); give a rank in [1, {usable}]",
        )
    config = peft.LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,
        bias="none",
    )
    devices = [p.device for p in model.parameters() if p.device.type == "cuda"][:1]
    trainable = {name: p.requires_grad for name, p in model.named_parameters()}  # peft freezes them all
    with seeded(settings.seed, devices), warnings.catch_warnings():
        # GPT-2 mixes Conv1D ([in, out]) and Linear layers: peft fixes fan_in_fan_out per layer, and says so.
        warnings.filterwarnings("ignore", message=r"fan_in_fan_out is set to", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*tie_word_embeddings.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
        try:
            adapted = peft.get_peft_model(model, config)
        except ValueError as exc:  # a layer of the targets peft cannot adapt (one's own class named Conv1D)
            raise OptionRefused("lora", str(exc)) from exc
    _ADAPTED[model] = trainable
    if settings.dropout > 0:
        device = next(model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(settings.seed)
        layers = [
            m.lora_dropout for m in adapted.modules() if isinstance(getattr(m, "lora_dropout", None), nn.ModuleDict)
        ]
        for drops in layers:  # peft's nn.Dropout, one per adapted layer
            for name, drop in list(drops.items()):
                if isinstance(drop, nn.Dropout):
                    drops[name] = OwnDropout(drop.p, generator)
    return adapted


class OwnDropout(nn.Module):
    """``nn.Dropout`` drawing from a session's own generator (``nn.Dropout`` has no generator argument)."""

    def __init__(self, p: float, generator: torch.Generator) -> None:
        super().__init__()
        self.p, self.generator = p, generator

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return x
        keep = torch.empty_like(x).bernoulli_(1 - self.p, generator=self.generator)
        return x * keep / (1 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def dropout_generator(model: nn.Module) -> torch.Generator | None:
    """The generator a LoRA session's dropout draws from (None without dropout)."""
    return next((m.generator for m in model.modules() if isinstance(m, OwnDropout)), None)


_ADAPTED: weakref.WeakKeyDictionary[nn.Module, dict[str, bool]] = weakref.WeakKeyDictionary()
"""The modules a LoRA session adapted (peft wraps their linear layers in place and freezes their weights), each with
whether each of its weights was trainable before."""


def undo_lora(adapted: nn.Module, model: nn.Module) -> None:
    """Take ``apply_lora``'s adapters out of ``model`` again (``adapted``: its peft model), each weight as trainable as
    it was: a resume refused once its ``model=`` module was adapted (for its optimizer state, its adapter's weights)
    leaves the module as it was given, free for the next session. A failure later in opening the session (out of
    memory for the sampler's copy, say) comes after the weights were copied in and is not undone."""
    trainable = _ADAPTED.pop(model, {})
    cast(Any, adapted).unload()  # peft (a PeftModel): each adapted layer's base layer back in its place
    for name, p in model.named_parameters():
        p.requires_grad_(trainable.get(name, True))


def refuse_adapted(model: object) -> None:
    """The refusal of ``model=`` (``OptionRefused``) for a module an earlier LoRA session adapted (in place: peft's
    layers and frozen weights stay in it): given to another session it trained, silently, that session's adapters on
    top of the earlier run's (a full-weight session only them, the base frozen). A model of one's own built with peft
    is taken."""
    if isinstance(model, nn.Module) and model in _ADAPTED:
        raise OptionRefused(
            "model",
            f"model ({type(model).__name__}) was adapted in place by an earlier LoRA session: it holds that session's "
            "adapters and its own weights are frozen; pass a fresh instance of the model (or a copy.deepcopy made "
            "before its first session), or resume_from= that session's checkpoint",
        )


def merged_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The base model's state dict (its own names) with every adapter folded into its layer's weight."""
    if type(model).__name__ != "PeftModel":
        return {k: v.detach().clone() for k, v in model.state_dict().items()}
    from peft.tuners.lora import LoraLayer

    base: nn.Module = model.get_base_model()  # type: ignore[operator]
    deltas: dict[str, Tensor] = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            layer: Any = module  # peft's Linear / Conv1D LoRA layers define get_delta_weight
            for adapter in layer.active_adapters:
                delta = layer.get_delta_weight(adapter)
                deltas[name] = deltas[name] + delta if name in deltas else delta
    out: dict[str, Tensor] = {}
    for key, value in base.state_dict().items():
        if ".lora_" in key or "lora_magnitude" in key:
            continue
        if ".base_layer." in key:
            layer, _, rest = key.partition(".base_layer.")
            key = f"{layer}.{rest}"
            if rest == "weight" and layer in deltas:
                value = (value.float() + deltas[layer].float()).to(value.dtype)
        out[key] = value.detach().clone()
    return out


def save_adapter(model: nn.Module, directory: Path, base_name: str | None = None) -> None:
    """The adapter alone, in peft's format (``PeftModel.from_pretrained(base, directory)`` loads it). ``base_name``:
    what its ``adapter_config.json`` and model card call the base model in place of the folder it was loaded from
    (``rlnb serve``'s served name: a download hands out no path of the server's)."""
    peft_model: Any = model
    base = peft_model.get_base_model()
    named = [(c, "base_model_name_or_path") for c in peft_model.peft_config.values()]  # adapter_config.json
    named += [(base.config, "_name_or_path"), (base, "name_or_path")]  # the model card's base_model and its tag
    kept = [(owner, attr, getattr(owner, attr)) for owner, attr in named if hasattr(owner, attr)]
    try:
        for owner, attr, _ in kept if base_name is not None else ():
            setattr(owner, attr, base_name)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Could not identify embedding layer", category=UserWarning)
            peft_model.save_pretrained(directory, save_embedding_layers=False)
    finally:
        for owner, attr, value in kept:
            setattr(owner, attr, value)
