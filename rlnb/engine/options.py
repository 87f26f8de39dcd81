"""The option groups of ``LocalBackend``: the model (``ModelOptions``), Muon (``MuonOptions``),
checkpoints (``CheckpointOptions``) and how operations compute (``ComputeOptions``).

``rlnb.connect("local", seed=1, device="cpu", resume_from=...)`` sets their fields by name; a group can
be given whole (``model_options=ModelOptions(device="cpu")``). Each group checks what it can when it is
built, before a model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from rlnb import wire
from rlnb.engine.models.compiled import check_compile
from rlnb.engine.optim.split import SplitOverride
from rlnb.engine.threads import check_threads


@dataclass(frozen=True)
class ModelOptions:
    """The model and its sampler.

    ``tokenizer``: a Hugging Face tokenizer (or its directory); None: a model loaded by name brings its
    own, a Hugging Face model without one takes token ids only, other modules get the byte codec.
    ``seed`` seeds the built-in model's initial weights and (unless ``sampling_seed`` is given) unseeded
    sampling. ``device``: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ...; ``dtype``: ``"auto"``
    (the checkpoint's; float32 for built-ins), ``"float32"``, ``"bfloat16"``. ``eos_token_id``: an extra
    token that ends a sampled sequence (the tokenizer's EOS always does). ``lora``: ``None``/``False``
    trains all weights; ``True`` or a LoRA config dict (rank, alpha, dropout, seed, train_unembed) freezes
    them and trains peft adapters on the linear layers. ``num_generator_replicas``: 0 makes a trainer-only
    session that rejects ``sample``. ``trust_remote_code``: let a Hugging Face folder whose config maps
    classes to its own code (``auto_map``) run that code; by default such a folder is refused."""

    tokenizer: Any = None
    seed: int = 0
    sampling_seed: int | None = None
    device: str | torch.device = "auto"
    dtype: str = "auto"
    eos_token_id: int | None = None
    lora: bool | dict[str, Any] | None = None
    num_generator_replicas: int = 1
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        wire.lora_config(self.lora)  # a ValueError naming lora


@dataclass(frozen=True)
class MuonOptions:
    """Muon's settings (ignored by Adam sessions): ``muon_scaling`` ``"original"`` (lr in spectral-norm
    units, KJ's 0.02) or ``"match_adam"``; ``ns_dtype``, the Newton-Schulz compute dtype (default: chosen
    from the device and CPU features); ``muon_split`` overrides the Muon/AdamW split
    (``rlnb.engine.optim.split.SplitOverride``)."""

    muon_scaling: Literal["original", "match_adam"] = "original"
    ns_dtype: str | torch.dtype | None = None
    muon_split: SplitOverride | None = None

    def __post_init__(self) -> None:
        if self.muon_scaling not in wire.MUON_SCALING:
            raise ValueError(f"muon_scaling must be 'original' or 'match_adam', got {self.muon_scaling!r}")


@dataclass(frozen=True)
class CheckpointOptions:
    """Where checkpoints go and what to start from: ``checkpoint_dir`` (default: a fresh temporary folder);
    ``resume_from``, a training checkpoint (``.pt``) or an inference checkpoint folder; ``load_optimizer``,
    with a training checkpoint unset/True restores optimizer state and step, False loads weights only with
    a fresh optimizer at step 0 (invalid for an inference checkpoint)."""

    checkpoint_dir: str | Path | None = None
    resume_from: str | Path | None = None
    load_optimizer: bool | None = None


@dataclass(frozen=True)
class ComputeOptions:
    """How operations compute: ``threads``, torch's intra-op threads for the session's operations on the
    CPU (None: the engine's thread policy decides, ``rlnb.engine.threads``; ignored on CUDA); ``compile``
    compiles the sampler's decode step (``torch.compile``; CUDA graphs on a GPU) for faster tokens after a
    one-time compile per shape (``rlnb.engine.models.compiled``)."""

    threads: int | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        check_threads(self.threads)
        check_compile(self.compile)
