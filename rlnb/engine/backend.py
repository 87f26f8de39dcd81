"""The in-process backend: Together's training-session semantics on a local torch model.

A ``LocalBackend`` is one training session. It owns two copies of the model: the *trainer*, which
forward-backward and optim-step change, and the *sampler*, which only weights-sync updates — so
sampling before a weights-sync sees the old policy, exactly as on the service. Operations run on one
worker thread, strictly in submission order (``worker``); what each does is in ``handlers``; the
model, whatever its kind, is behind a ``ModelAdapter`` (``adapter``). Gradients accumulate across
forward-backward calls until the next optim-step.

Failure codes follow the API: bad inputs → ``INVALID_INPUT``; a non-finite loss or gradient →
``NON_FINITE_LOSS`` with parameters and optimizer state untouched (the offending gradients are
dropped); out of memory → ``RESOURCE_EXHAUSTED``; anything unexpected → ``INTERNAL_ERROR``; operations
left when the session closes → ``SESSION_NOT_ACTIVE``.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlnb import wire
from rlnb.engine import checkpoints, handlers
from rlnb.engine.models.adapter import ModelAdapter, build_adapter
from rlnb.engine.models.hf import DTYPES
from rlnb.engine.models.lora import LoraSettings, apply_lora
from rlnb.engine.optim.muon import ns_dtype_for
from rlnb.engine.optim.split import SplitOverride, split_params
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.engine.worker import Worker
from rlnb.text import Codec
from rlnb.wire import Listener, OptimizerKind


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks CUDA when available, else CPU; asking for CUDA without it is an error now, not later."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} but this torch has no CUDA device (torch {torch.__version__})")
    return resolved


def sampler_copy(trainer: nn.Module) -> nn.Module:
    """The sampler: a copy of the trainer that shares every tensor training never changes (frozen
    parameters, buffers) and owns copies of the trainable ones. Full-weight sessions get a full
    second copy; LoRA sessions only a second adapter."""
    memo: dict[int, Any] = {id(p): p for p in trainer.parameters() if not p.requires_grad}
    memo.update({id(b): b for b in trainer.buffers()})
    sampler = copy.deepcopy(trainer, memo)
    for p in sampler.parameters():
        p.requires_grad_(False)  # shared tensors are frozen already; the copies need no grad either
    return sampler.eval()


class LocalBackend:
    """One training session on an in-process torch model.

    Args:
        optimizer: ``"adam"`` or ``"muon"``; fixed for the session's life, as on the service.
        model: ``"tiny"`` / ``"small"`` (built-in byte-level transformers), a Hugging Face causal LM by
            local directory or hub id (from the local cache: rlnb never downloads), a loaded
            transformers model, or any ``nn.Module`` mapping token ids ``[B, T]`` to logits.
        tokenizer: a Hugging Face tokenizer (or its directory). None: a model loaded by name brings its
            own; a Hugging Face model without one takes token ids only; other modules get the byte codec.
        seed: seeds the built-in model's initial weights and (unless ``sampling_seed`` is given) unseeded
            sampling.
        sampling_seed: seeds the sequence of seeds unseeded samples use (default: ``seed``).
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ...
        dtype: ``"auto"`` (the checkpoint's; float32 for built-ins), ``"float32"``, ``"bfloat16"``.
        muon_scaling: ``"original"`` (lr in spectral-norm units, KJ's 0.02) or ``"match_adam"``.
        ns_dtype: Newton-Schulz compute dtype (default: chosen from the device and CPU features).
        muon_split: override the Muon/AdamW split (see ``rlnb.engine.optim.split.SplitOverride``).
        num_generator_replicas: 0 makes a trainer-only session that rejects ``sample``.
        checkpoint_dir: where checkpoints are written (default: a fresh temporary folder).
        resume_from: a training checkpoint (``.pt``) or an inference checkpoint folder to start from.
        load_optimizer: with a training checkpoint, unset/True restores optimizer state and step;
            False loads weights only, with a fresh optimizer at step 0. Invalid for inference ones.
        eos_token_id: an extra token that ends a sampled sequence (the tokenizer's EOS always does).
        lora: ``None``/``False`` trains all weights; ``True`` or a LoRA config dict (rank, alpha,
            dropout, seed, train_unembed) freezes them and trains peft adapters on the linear layers.
        op_delay: extra seconds each operation takes (simulates remote compute in benchmarks).
    """

    def __init__(
        self,
        optimizer: OptimizerKind = "adam",
        model: str | nn.Module = "tiny",
        *,
        tokenizer: Any = None,
        seed: int = 0,
        sampling_seed: int | None = None,
        device: str | torch.device = "auto",
        dtype: str = "auto",
        muon_scaling: str = "original",
        ns_dtype: str | torch.dtype | None = None,
        muon_split: SplitOverride | None = None,
        num_generator_replicas: int = 1,
        checkpoint_dir: str | Path | None = None,
        resume_from: str | Path | None = None,
        load_optimizer: bool | None = None,
        eos_token_id: int | None = None,
        lora: bool | dict[str, Any] | None = None,
        op_delay: float = 0.0,
    ):
        wire.optimizer_kind(optimizer)
        if muon_scaling not in ("original", "match_adam"):
            raise ValueError(f"muon_scaling must be 'original' or 'match_adam', got {muon_scaling!r}")
        self.optimizer: OptimizerKind = optimizer
        self.device = resolve_device(device)
        self.seed = seed
        checked = wire.lora_config(lora)
        resume = checkpoints.load(Path(resume_from), self.device) if resume_from is not None else None
        if isinstance(tokenizer, str):
            tokenizer = _load_tokenizer(tokenizer)
        adapter = build_adapter(
            model, tokenizer=tokenizer, seed=seed, dtype=dtype, device=self.device, eos_token_id=eos_token_id
        )
        self.lora = None if checked is False else LoraSettings.from_config(checked)
        trainer = adapter.module
        if self.lora is not None:
            trainer = apply_lora(trainer, adapter.lora_targets(self.lora.train_unembed), self.lora)
        if resume is not None:
            if resume["type"] != "training" and load_optimizer:
                raise ValueError("load_optimizer applies only to training checkpoints; this is an inference checkpoint")
            checkpoints.restore_weights(resume, adapter, trainer, self.lora)
            if ns_dtype is None and resume.get("ns_dtype"):
                ns_dtype = resume["ns_dtype"]  # resume with the dtype the run started with
        split = split_params(trainer, adapter.embedding_params(), muon_split) if optimizer == "muon" else None
        ns = _ns_dtype(ns_dtype, self.device)
        optim = TrainerOptimizer(trainer, optimizer, split, muon_scaling=muon_scaling, ns_dtype=ns)  # type: ignore[arg-type]
        self.engine = handlers.Engine(
            adapter=adapter,
            trainer=trainer,
            sampler=sampler_copy(trainer),
            optim=optim,
            kind=optimizer,
            store=checkpoints.CheckpointStore(checkpoint_dir),
            meta={
                "base_model": adapter.name,
                "base_model_dir": checkpoints.model_dir(adapter),
                "lora": self.lora.as_dict() if self.lora else None,
                "ns_dtype": str(ns).removeprefix("torch."),
                "optimizer_kind": optimizer,
            },
            num_generator_replicas=num_generator_replicas,
            op_delay=op_delay,
        )
        self.engine.sample_rng.manual_seed(seed if sampling_seed is None else sampling_seed)
        if resume is not None and resume["type"] == "training" and load_optimizer is not False:
            optim.load_state_dict(resume["optimizer"])
            self.engine.step = self.engine.weights_version = int(resume["step"])
        created = datetime.now(UTC)
        self._info = wire.Session(
            id=f"local-{uuid.uuid4()}",
            status=wire.SessionStatus.RUNNING,
            base_model=adapter.name,
            model_resources_id="local",
            created_by="local",
            created_at=created,
            updated_at=created,
            lora_config=wire.LoraConfig(**self.lora.as_dict()) if self.lora else None,
            resume_from_checkpoint_id=Path(resume_from).stem if resume_from is not None else None,
        )
        engine = self.engine
        self._worker = Worker(
            lambda kind, body, cancelled: handlers.run(engine, kind, body, cancelled),
            name=f"rlnb-{self._info.id}",
            classify=handlers.classify,
        )

    # -- what notebooks and the server read --------------------------------------------------------

    @property
    def adapter(self) -> ModelAdapter:
        return self.engine.adapter

    @property
    def trainer(self) -> nn.Module:
        return self.engine.trainer

    @property
    def sampler(self) -> nn.Module:
        return self.engine.sampler

    @property
    def optim(self) -> TrainerOptimizer:
        return self.engine.optim

    @property
    def codec(self) -> Codec:
        return self.engine.adapter.codec

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer, or None for the byte-level built-in models."""
        return self.codec.tokenizer

    @property
    def vocab_size(self) -> int:
        return self.engine.adapter.vocab_size

    @property
    def context_length(self) -> int:
        return self.engine.adapter.context_length

    def checkpoint_path(self, ckpt_id: str) -> Path:
        """The ``.pt`` file (training) or folder (inference) a checkpoint of this session was written to."""
        return self.engine.store.path(ckpt_id)

    def checkpoint_files(self, ckpt_id: str, variant: checkpoints.Variant = "merged") -> list[Path]:
        """The files a download of the checkpoint serves (see ``CheckpointStore.files``)."""
        return self.engine.store.files(ckpt_id, variant)

    # -- Backend protocol ----------------------------------------------------------------------------

    def submit(self, kind: wire.OperationKind, body: wire._Model | None, listener: Listener) -> None:
        if kind not in handlers.HANDLERS:
            raise ValueError(f"unknown operation kind {kind!r}")
        self._worker.submit(kind, body, listener)

    def session(self) -> wire.Session:
        e = self.engine
        info = self._info.model_copy(deep=True)
        info.step = e.step
        info.policy_state = wire.PolicyState(
            applied_weights_version=e.weights_version, target_weights_version=e.weights_version, trainer_step=e.step
        )
        info.training_checkpoints = list(e.training_checkpoints)
        info.inference_checkpoints = list(e.inference_checkpoints)
        return info

    def config(self) -> dict[str, Any]:
        e = self.engine
        return {
            "backend": "local",
            "session_id": self._info.id,
            "model": e.adapter.name,
            "model_kind": e.adapter.kind,
            "optimizer": self.optimizer,
            "muon_scaling": e.optim.muon_scaling,
            "ns_dtype": e.meta["ns_dtype"] if self.optimizer == "muon" else None,
            "param_split": e.optim.split.as_config() if self.optimizer == "muon" else None,
            "seed": self.seed,
            "device": str(self.device),
            "dtype": str(next(e.trainer.parameters()).dtype).removeprefix("torch."),
            "lora": e.meta["lora"],
            "resume_from": self._info.resume_from_checkpoint_id,
        }

    def close(self, timeout: float | None = None) -> None:
        """Stop the session: a running sample stops between tokens, anything else running finishes,
        queued operations fail ``SESSION_NOT_ACTIVE``."""
        if not self._worker.closed:
            self._info.status = wire.SessionStatus.STOPPED
            self._info.updated_at = datetime.now(UTC)
        self._worker.close(timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued operation has finished; False if ``timeout`` passed first."""
        return self._worker.wait_idle(timeout)


def _ns_dtype(ns_dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if ns_dtype is None:
        return ns_dtype_for(device)
    if isinstance(ns_dtype, torch.dtype):
        return ns_dtype
    if ns_dtype not in DTYPES:
        raise ValueError(f"ns_dtype must be one of {sorted(DTYPES)}, got {ns_dtype!r}")
    return DTYPES[ns_dtype]


def _load_tokenizer(path: str) -> Any:
    from rlnb.engine.models import hf

    transformers = hf.require_transformers()
    return transformers.AutoTokenizer.from_pretrained(hf.resolve(path))
