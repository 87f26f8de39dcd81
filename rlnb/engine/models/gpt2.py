"""The built-in model as a GPT-2 checkpoint: it is GPT-2 in all but two details (exact GELU, an untied head),
so its weights can be written as a checkpoint that transformers loads (inference checkpoints use this) and
read back."""

from __future__ import annotations

import torch
from torch import Tensor

from rlnb.engine.models.tiny import TinyConfig, TinyTransformer

_GPT2_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # GPT-2 stores these as [in, out]


def gpt2_config(config: TinyConfig) -> dict[str, object]:
    """A ``GPT2Config`` (as the JSON ``config.json`` holds) describing ``config``'s architecture."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": 4 * config.n_embd,
        "activation_function": "gelu",  # exact GELU, as F.gelu; GPT-2's own is the tanh approximation
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": None,
    }


def to_gpt2(state: dict[str, Tensor], config: TinyConfig) -> dict[str, Tensor]:
    """``TinyTransformer`` weights under GPT-2's names and layouts (absent biases written as zeros)."""
    out = {"transformer.wte.weight": state["wte.weight"], "transformer.wpe.weight": state["wpe.weight"]}
    out["lm_head.weight"] = state["lm_head.weight"]
    for prefix in [f"blocks.{i}." for i in range(config.n_layer)] + [""]:
        hf = "transformer.h." + prefix.removeprefix("blocks.") if prefix else "transformer."
        norms = ("ln_1", "ln_2") if prefix else ("ln_f",)
        for ln in norms:
            weight = state[f"{prefix}{ln}.weight"]
            out[f"{hf}{ln}.weight"] = weight
            out[f"{hf}{ln}.bias"] = state.get(f"{prefix}{ln}.bias", torch.zeros_like(weight))
        for lin in _GPT2_CONV1D if prefix else ():
            weight = state[f"{prefix}{lin}.weight"]
            out[f"{hf}{lin}.weight"] = weight.t().contiguous()
            out[f"{hf}{lin}.bias"] = state.get(f"{prefix}{lin}.bias", weight.new_zeros(weight.shape[0]))
    return out


def from_gpt2(state: dict[str, Tensor], config: TinyConfig) -> dict[str, Tensor]:
    """The inverse of ``to_gpt2``, for a model built from ``config`` (biases dropped when it has none)."""
    shapes = _names_only(config)
    missing = {_gpt2_name(k) for k in shapes} - set(state)
    if missing:
        raise ValueError(f"not a checkpoint of this model: missing {sorted(missing)[:3]}")
    back: dict[str, Tensor] = {}
    for key, value in shapes.items():
        src = _gpt2_name(key)
        tensor = state[src]
        conv1d = key.endswith(".weight") and any(c in key for c in _GPT2_CONV1D)
        back[key] = tensor.t().contiguous() if conv1d else tensor
        if back[key].shape != value.shape:
            raise ValueError(f"{src} has shape {tuple(back[key].shape)}, this model needs {tuple(value.shape)}")
    return back


def _gpt2_name(key: str) -> str:
    if key == "lm_head.weight":
        return key
    return "transformer." + key.replace("blocks.", "h.")


def _names_only(config: TinyConfig) -> dict[str, Tensor]:
    """Every parameter name of a model of ``config`` with an empty tensor of its shape (on the meta device)."""
    with torch.device("meta"):
        return dict(TinyTransformer(config).state_dict())
