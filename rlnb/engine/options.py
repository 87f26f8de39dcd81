"""The option groups of ``LocalBackend``: the model (``ModelOptions``), Muon (``MuonOptions``),
checkpoints (``CheckpointOptions``) and how operations compute (``ComputeOptions``).

``rlnb.connect("local", seed=1, device="cpu", resume_from=...)`` sets their fields by name; a group can
be given whole (``model_options=ModelOptions(device="cpu")``). Each group checks what it can when it is
built, before a model is loaded.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlnb import wire
from rlnb._input.checks import check_bool, is_integer, refuse_dangling_link, refuse_not_folder, set_int, user_path
from rlnb.engine.dtypes import check_weight_dtype
from rlnb.engine.models.compiled import check_compile
from rlnb.engine.models.hf import DTYPES
from rlnb.engine.optim.split import GROUPS, SplitOverride
from rlnb.engine.threads import check_threads
from rlnb.text.prompts import tokenizer_spec


@dataclass(frozen=True)
class ModelOptions:
    """The model and its sampler.

    ``tokenizer``: a Hugging Face tokenizer (or its directory); None: a model loaded by name brings its own, a Hugging
    Face model without one takes token ids only, other modules get the byte codec. ``seed`` seeds the built-in model's
    initial weights and (unless ``sampling_seed`` is given) unseeded sampling; a session resumed from a training
    checkpoint goes on with the sampler's generator it saved (``sampling_seed=`` starts a new stream). ``device``:
    ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ...; ``dtype``: ``"auto"`` (the checkpoint's; float32 for
    built-ins), ``"float32"``, ``"bfloat16"``. ``eos_token_id``: an extra token that ends a sampled sequence, or a list
    of them as generation configs write it (the tokenizer's EOS always does; a reward's text leaves out whichever ended
    it). ``lora``: ``None``/``False`` trains all weights; ``True`` or a LoRA config dict (rank, alpha, dropout, seed,
    train_unembed) freezes them and trains peft adapters on the linear layers. ``num_generator_replicas``: 0 makes a
    trainer-only session that rejects ``sample``. ``trust_remote_code``: let a Hugging Face folder whose config maps
    classes to its own code (``auto_map``) run that code; by default such a folder is refused."""

    tokenizer: Any = None
    seed: int = 0
    sampling_seed: int | None = None
    device: str | torch.device = "auto"
    dtype: str = "auto"
    eos_token_id: int | Sequence[int] | None = None
    lora: bool | dict[str, Any] | None = None
    num_generator_replicas: int = 1
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        set_int(self, "seed", *SEED_RANGE)
        set_int(self, "sampling_seed", *SEED_RANGE, optional=True)
        set_int(self, "num_generator_replicas", 0, wire.INT32_MAX)
        check_weight_dtype(self.dtype)  # refused when built, not once connect runs
        check_device(self.device)
        tokenizer_spec(self.tokenizer)  # a TypeError naming tokenizer; a path is loaded with the model
        eos_ids(self.eos_token_id)  # the vocabulary's end is checked once the model is loaded
        wire.lora_config(self.lora)  # a ValueError naming lora
        trust = check_bool("trust_remote_code", self.trust_remote_code)  # "no" is truthy: it would run a folder's code
        object.__setattr__(self, "trust_remote_code", trust)


SEED_RANGE = (-(2**63), 2**63 - 1)
"""What a seed may be: torch's generators take any int64."""


def check_device(device: object, name: str = "device") -> torch.device | None:
    """``device`` as torch names it (None for ``"auto"``), or a ``ValueError`` naming it, before ``connect`` runs
    (``"tpu"`` too). Only the CPU and CUDA are taken: torch parses more names, and ``"meta"`` would open a session
    whose every operation fails INTERNAL_ERROR, ``"mps"``, ``"xpu"``, ``"hpu"`` raise torch's own errors.
    Whether CUDA is there is checked when the session starts. ``name``: the option said (``rlnb demo``'s
    ``--device``)."""
    if str(device) == "auto":
        return None
    try:
        resolved = torch.device(device)  # type: ignore[call-overload]
    except (RuntimeError, TypeError):  # device=None: torch's "invalid combination of arguments"
        resolved = None
    if resolved is None or resolved.type not in DEVICE_TYPES:
        raise ValueError(f"{name} must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return resolved


DEVICE_TYPES = ("cpu", "cuda")
"""The kinds of device the engine runs on."""


def eos_ids(value: object, vocab: int | None = None) -> list[int]:
    """``eos_token_id`` as a list of token ids: None, an id or a list of ids, each an int (not a bool) in
    [0, ``vocab``) (below int64's end while the vocabulary is not known); a ``ValueError`` naming
    ``eos_token_id`` and the range otherwise (a string such as ``"</s>"`` is not its id)."""
    if value is None:
        return []
    listed = value.tolist() if hasattr(value, "tolist") else value  # numpy / torch: an id or an array of them
    ids: list[Any] = list(listed) if isinstance(listed, list | tuple) and listed else [listed]
    high = vocab if vocab is not None else 2**63
    if any(not is_integer(i) or not 0 <= i < high for i in ids):
        where = f"[0, {vocab - 1}] (the vocabulary)" if vocab is not None else "[0, the vocabulary's size)"
        raise ValueError(
            f"eos_token_id must be None, a token id or a non-empty list of token ids, each an integer in {where}, "
            f"got {value!r}"
        )
    return [int(i) for i in ids]


@dataclass(frozen=True)
class MuonOptions:
    """Muon's settings (``MUON_ONLY``: an Adam session refuses any given, ``refuse_muon_only``): ``muon_scaling``
    ``"original"`` (lr in spectral-norm units, KJ's 0.02) or ``"match_adam"``; ``ns_dtype``, the Newton-Schulz
    compute dtype (default: chosen from the device and CPU features); ``muon_split`` overrides the Muon/AdamW split
    (``rlnb.engine.optim.split.SplitOverride``)."""

    muon_scaling: wire.MuonScaling | None = None
    """None: ``"original"``, and not given (an Adam session took ``muon_scaling="original"`` in silence)."""
    ns_dtype: str | torch.dtype | None = None
    muon_split: SplitOverride | None = None

    def __post_init__(self) -> None:
        if self.muon_scaling is not None and self.muon_scaling not in wire.MUON_SCALING:
            raise ValueError(f"muon_scaling must be None, 'original' or 'match_adam', got {self.muon_scaling!r}")
        ns = self.ns_dtype  # checked before the model loads (minutes for a large one), not at the first step
        if ns is not None and not (isinstance(ns, str) and ns in DTYPES or isinstance(ns, torch.dtype) and ns in
                                   DTYPES.values()):  # fmt: skip
            raise ValueError(f"ns_dtype must be one of {sorted(DTYPES)} or None (chosen from the hardware), got {ns!r}")
        split = self.muon_split  # a Mapping's groups are checked here too, not once the model has loaded
        if (
            split is not None
            and not callable(split)
            and not (isinstance(split, Mapping) and all(isinstance(k, str) and v in GROUPS for k, v in split.items()))
        ):
            raise ValueError(
                "muon_split must be None, {name pattern: 'muon' | 'adam'} or a function (name, param) -> 'muon' | "
                f"'adam' | None, got {split!r}"
            )


MUON_ONLY = frozenset(f.name for f in dataclasses.fields(MuonOptions))
"""The session options only a Muon session takes: ``MuonOptions``' fields."""


def refuse_muon_only(optimizer: wire.OptimizerKind, muon: MuonOptions, why: str = "") -> None:
    """``ValueError`` naming the ``MUON_ONLY`` options given other than their defaults unless ``optimizer`` is Muon: an
    Adam session or ensemble took them and used none, in silence (over the API, ``muon_scaling`` with adam is
    refused too). ``why`` ends the message (default: this session's optimizer)."""
    fields = dataclasses.fields(MuonOptions)
    given = [f"{f.name}={getattr(muon, f.name)!r}" for f in fields if getattr(muon, f.name) != f.default]
    if optimizer != wire.MUON and given:
        names = ", ".join(f.name for f in fields[:-1]) + f" and {fields[-1].name}"
        said = ", ".join(given)[:300]  # a muon_split function or dict can print long
        why = why or f"this session's optimizer is {optimizer}"
        raise ValueError(f"{said}: {names} are for Muon sessions (optimizer='muon') only; {why}")


@dataclass(frozen=True)
class CheckpointOptions:
    """Where checkpoints go and what to start from: ``checkpoint_dir`` (default: a fresh temporary folder);
    ``resume_from``, a training checkpoint (``.pt``) or an inference checkpoint folder; ``load_optimizer``,
    with a training checkpoint unset/True restores optimizer state and step, False loads weights only with
    a fresh optimizer at step 0 (invalid for an inference checkpoint)."""

    checkpoint_dir: str | Path | None = None
    resume_from: str | Path | None = None
    load_optimizer: bool | None = None

    def __post_init__(self) -> None:
        """Paths as ``Path``s with ``~`` expanded; a ``checkpoint_dir`` that is (or is under) a file, or that cannot
        be made or written, is refused here, not at the first save."""
        object.__setattr__(self, "load_optimizer", check_bool("load_optimizer", self.load_optimizer, optional=True))
        if self.load_optimizer is not None and self.resume_from is None:  # would be ignored without a word
            raise ValueError(
                "load_optimizer applies only with resume_from (a training checkpoint to resume); "
                f"got load_optimizer={self.load_optimizer} and no resume_from"
            )
        if self.checkpoint_dir is not None:
            object.__setattr__(self, "checkpoint_dir", checkpoint_folder(self.checkpoint_dir))
        if self.resume_from is not None:
            object.__setattr__(self, "resume_from", _checkpoint(self.resume_from))


def checkpoint_folder(value: object) -> Path:
    """``value`` as a folder that can hold checkpoints (made now), else a ``ValueError`` naming ``checkpoint_dir``."""
    if value == "":
        raise ValueError("checkpoint_dir must be a folder path or None (a fresh temporary folder), got ''")
    folder = user_path("checkpoint_dir", value)
    try:  # made and written to now: a folder under /proc, or one not writable, would fail only at the first save
        refuse_dangling_link("checkpoint_dir", folder)  # a link to nothing: mkdir said "File exists", naming no link
        refuse_not_folder("checkpoint_dir", folder, "checkpoints go")
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise ValueError(f"checkpoint_dir {str(folder)!r} cannot hold checkpoints: {exc.strerror or exc}") from None
    return folder.absolute()  # a relative one would follow os.chdir (``%cd`` in a notebook)


def _checkpoint(value: object) -> Path:
    if value == "":
        raise ValueError("resume_from must be a checkpoint's path or None, got ''")
    checkpoint = getattr(value, "checkpoint", None)
    if checkpoint is not None and not isinstance(value, str | os.PathLike):
        raise TypeError(
            f"resume_from must be a checkpoint's path, not the result of a save ({type(value).__name__}): pass "
            f"session.backend.checkpoint_path(result.checkpoint.id), here for {getattr(checkpoint, 'id', '?')!r}"
        )
    path = user_path("resume_from", value)
    try:  # a missing one is named when it is loaded; this raises for a name too long, a folder not read
        odd = path.exists() and not (path.is_file() or path.is_dir())
    except OSError as exc:
        raise ValueError(f"resume_from {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if odd:  # torch.load would wait on a pipe for ever
        raise ValueError(f"resume_from {str(path)!r} is neither a file nor a folder (a pipe, a device): "
                         "not a checkpoint")  # fmt: skip
    return path


@dataclass(frozen=True)
class ComputeOptions:
    """How operations compute: ``threads``, torch's intra-op threads for the session's operations on the
    CPU (None: the engine's thread policy decides, ``rlnb.engine.threads``; ignored on CUDA); ``compile``
    compiles the sampler's decode step (``torch.compile``, without CUDA graphs) for faster tokens after a
    one-time compile per shape (``rlnb.engine.models.compiled``)."""

    threads: int | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "threads", check_threads(self.threads))  # np.int64(2) kept as a plain int
        check_compile(self.compile)
