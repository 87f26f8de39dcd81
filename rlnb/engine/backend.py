"""The in-process backend: Together's training-session semantics on a local torch model.

A ``LocalBackend`` is one training session. It owns two copies of the model: the *trainer*, which
forward-backward and optim-step change, and the *sampler*, which only weights-sync updates — so
sampling before a weights-sync sees the old policy, exactly as on the service. Operations run on one
worker thread, strictly in submission order (``worker``); what each does is in ``handlers``; the
model, whatever its kind, is behind a ``ModelAdapter`` (``adapter``), made with its sampler copy in
``model_setup``. Gradients accumulate across forward-backward calls until the next optim-step.

Failure codes follow the API: bad inputs → ``INVALID_INPUT``; a non-finite loss or gradient →
``NON_FINITE_LOSS`` with parameters and optimizer state untouched (the offending gradients are
dropped); out of memory → ``RESOURCE_EXHAUSTED``; anything unexpected → ``INTERNAL_ERROR``; operations
left when the session closes → ``SESSION_NOT_ACTIVE``.
"""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from torch import nn

from rlnb import wire
from rlnb._input.checks import check_seconds
from rlnb._input.options import refuse_unknown, take
from rlnb.engine import assembly, checkpoint_run, checkpoints, handlers, model_setup, oom, refusals
from rlnb.engine.checkpoint_files import Variant
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.models.compiled import Compiler
from rlnb.engine.models.lora import LoraSettings
from rlnb.engine.models.tiny import SIZES
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.engine.options import CheckpointOptions, ComputeOptions, ModelOptions, MuonOptions, refuse_muon_only
from rlnb.engine.threads import ThreadUse
from rlnb.engine.worker import Worker
from rlnb.history.runconfig import LOCAL
from rlnb.params import Hyperparams
from rlnb.text.codec import Codec
from rlnb.wire import Listener, OptimizerKind


def _ran_out(exc: Exception, model: str | nn.Module, trainer: nn.Module | None, lora: bool, mo: ModelOptions,
             device: Any, resuming: object) -> oom.ModelOutOfMemory:  # fmt: skip
    """The error of a build that ran out of memory (``exc``), with the copies of the weights the session keeps and
    the checkpoint it was resuming from (``resuming``, None: none)."""
    copies = 1 + bool(mo.num_generator_replicas and not lora)  # a LoRA sampler shares the base
    name = (f"rlnb/{model}" if model in SIZES else model) if isinstance(model, str) else type(model).__name__
    return oom.build_refusal(exc, name, oom.weights_of(model, trainer), copies, mo, device, resuming)


class LocalBackend:
    """One training session on an in-process torch model.

    Args:
        optimizer: ``"adam"`` or ``"muon"``; fixed for the session's life, as on the service.
        model: ``"tiny"`` / ``"small"`` (built-in byte-level transformers), a Hugging Face causal LM by
            local directory or hub id (from the local cache: rlnb never downloads), a loaded
            transformers model, or any ``nn.Module`` mapping token ids ``[B, T]`` to logits.
        op_delay: extra seconds each operation takes (simulates remote compute in benchmarks).
        model_options, muon_options, checkpoint_options, compute_options: the option groups
            (``rlnb.engine.options``; ``threads`` and ``compile`` are ``ComputeOptions``').
        options: the groups' fields by name (``seed=``, ``device=``, ``lora=``, ``muon_scaling=``,
            ``resume_from=``, ``trust_remote_code=``, ``threads=``, ...), over the groups given whole.
    """

    def __init__(
        self,
        optimizer: OptimizerKind = wire.ADAM,
        model: str | nn.Module = "tiny",
        *,
        op_delay: float = 0.0,
        model_options: ModelOptions | None = None,
        muon_options: MuonOptions | None = None,
        checkpoint_options: CheckpointOptions | None = None,
        compute_options: ComputeOptions | None = None,
        **options: Any,
    ):
        self.optimizer: OptimizerKind = wire.optimizer_kind(optimizer)
        op_delay = check_seconds("op_delay", op_delay)  # before the model loads
        mo = take(ModelOptions, options, model_options)
        muon = take(MuonOptions, options, muon_options)
        saved = take(CheckpointOptions, options, checkpoint_options)
        compute = take(ComputeOptions, options, compute_options)
        refuse_unknown(options, "LocalBackend()", backend=True)
        refuse_muon_only(self.optimizer, muon)  # taken in silence; refused, as over the API (wire.optimizer_config)
        self.device = model_setup.resolve_device(mo.device)
        self.seed = mo.seed
        checked = wire.lora_config(mo.lora)
        model = os.fspath(model) if isinstance(model, os.PathLike) else model
        try:  # a checkpoint that does not fit in memory: the build's error (its readers re-raise), not a damaged file
            resume = checkpoints.load(Path(saved.resume_from), self.device) if saved.resume_from is not None else None
        except Exception as exc:
            if not oom.out_of_memory(exc):
                raise
            raise _ran_out(exc, model, None, checked is not False, mo, self.device, saved.resume_from) from exc
        self.lora = None if checked is False else LoraSettings.from_config(checkpoints.with_saved_lora(checked, resume))
        if resume is not None and resume["type"] != "training" and saved.load_optimizer:
            raise ValueError("load_optimizer applies only to training checkpoints; this is an inference checkpoint")
        # the run that goes on from a training checkpoint (its optimizer state loaded), else None: a fresh run
        goes_on = resume is not None and resume["type"] == "training" and saved.load_optimizer is not False
        continued = resume if goes_on else None
        started = continued.get("ns_dtype") if continued is not None else None  # the run's own dtype
        ns = assembly.ns_dtype(muon.ns_dtype if muon.ns_dtype is not None else started, self.device)

        def make_optimizer(adapter: ModelAdapter, trainer: nn.Module) -> TrainerOptimizer:
            """Asked before the checkpoint's weights are copied in: a refusal leaves model= as it was."""
            optim = assembly.build_optimizer(self.optimizer, adapter, trainer, muon, ns)
            if continued is not None:
                checkpoint_run.load_optimizer(continued, optim, trainer, continued["path"], mo.sampling_seed is None)
            return optim

        trainer = None
        try:  # out of memory: one error saying so, not torch's allocator's words or a refusal of the model
            adapter, trainer, optim = model_setup.build_model(model, mo, self.device, self.lora, resume, make_optimizer)
            compiler = Compiler(self.device) if compute.compile else None
            self.engine = assembly.build_engine(optim, adapter, trainer, self.lora, mo, ns, saved, op_delay, compiler)
        except Exception as exc:
            if not oom.out_of_memory(exc):
                raise
            raise _ran_out(exc, model, trainer, self.lora is not None, mo, self.device, saved.resume_from) from exc
        self._reopen = assembly.reopen_options(mo, muon, self.engine)
        self.engine.sample_rng.manual_seed(mo.seed if mo.sampling_seed is None else mo.sampling_seed)
        if continued is not None:
            self.engine.step = self.engine.weights_version = checkpoint_run.restore_run(continued, trainer)
            if mo.sampling_seed is None:  # unseeded samples go on from where the run was, unless seeded anew
                checkpoint_run.restore_sample_rng(continued, self.engine.sample_rng)
        created = datetime.now(UTC)
        self._info = wire.Session(
            id=f"local-{uuid.uuid4()}",
            status=wire.SessionStatus.RUNNING,
            base_model=adapter.name,
            model_resources_id=LOCAL,
            created_by=LOCAL,
            created_at=created,
            updated_at=created,
            lora_config=wire.LoraConfig(**self.lora.as_dict()) if self.lora else None,
            resume_from_checkpoint_id=None if resume is None else Path(str(saved.resume_from)).name.removesuffix(".pt"),
        )
        self._threads = ThreadUse(self.device, compute.threads)
        self._worker = Worker(self._run, name=f"rlnb-{self._info.id}", classify=handlers.classify)
        self.runs_here: Callable[[], bool] = self._worker.runs_here
        """Whether the caller is the thread that runs this session's operations (``Operation.result`` refuses to
        wait there): the worker's own method, where a method of the backend that asked it would be a Python call a
        wait."""
        worker = weakref.ref(self._worker)
        model_setup.claim(model, lambda: (w := worker()) is not None and not w.closed)

    def _run(self, kind: wire.OperationKind, body: Any, cancelled: threading.Event) -> Any:
        """One operation on the worker thread, with the thread count the policy gives it."""
        self._threads.before(self.engine.step, kind, body)
        ok = False
        try:
            output = handlers.run(self.engine, kind, body, cancelled)
            ok = True
            return output
        finally:
            self._threads.after(ok)

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

    max_num_samples = wire.MAX_NUM_SAMPLES
    """The most completions per prompt a sample may ask for (``wire.MAX_NUM_SAMPLES``)."""

    @property
    def max_stop_strings(self) -> int:
        """The most stop strings a sample may give (the engine's bound, ``wire.MAX_STOP_STRINGS`` unless set)."""
        return self.engine.max_stop_strings

    @property
    def max_stop_chars(self) -> int:
        """The most characters of each stop string (``wire.MAX_STOP_CHARS`` unless set)."""
        return self.engine.max_stop_chars

    def check_optim_step(self, hp: Hyperparams) -> None:
        """A ``ValueError`` naming the field where an optim-step with ``hp`` would be refused ``INVALID_INPUT`` by these
        weights (``TrainerOptimizer.check``): ``Session.check_params`` asks before anything is sent."""
        self.engine.optim.check(hp)

    def half_stepped_refusal(self) -> str | None:
        """What an optim-step here is refused with now that an earlier one stopped part way (``refusals``), or None:
        ``rl_step`` asks before it samples a batch whose step would be refused."""
        e = self.engine
        return (
            refusals.half_stepped_words(wire.OperationKind.OPTIM_STEP, bool(e.training_checkpoints))
            if e.half_stepped
            else None
        )

    def reopen_options(self) -> dict[str, Any]:
        """The options that open this session's model again, with a checkpoint of it (``assembly.reopen_options``)."""
        return dict(self._reopen)

    def checkpoint_path(self, ckpt_id: str) -> Path:
        """The ``.pt`` file (training) or folder (inference) a checkpoint of this session was written to."""
        return self.engine.store.path(ckpt_id)

    def discard_checkpoint(self, ckpt_id: str) -> None:
        """Delete a checkpoint of this session that nobody will load again (Find LR's copy of the weights, once
        loaded: weights and optimizer state, several GB on a real model, were left behind at every click). The
        session's info lists it no more: nothing could resume from it. A file that cannot be deleted is an ``OSError``
        naming it, and the checkpoint stays listed."""
        self.engine.store.discard(ckpt_id)
        lists: tuple[list[Any], ...] = (self.engine.training_checkpoints, self.engine.inference_checkpoints)
        for listed in lists:
            for ckpt in [c for c in listed if c.id == ckpt_id]:
                listed.remove(ckpt)  # in place: the worker may be appending a new checkpoint

    def checkpoint_files(self, ckpt_id: str, variant: Variant = "merged") -> list[Path]:
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
        info.updated_at = max(info.updated_at, e.changed_at or info.updated_at)
        return info

    def config(self) -> dict[str, Any]:
        e = self.engine
        return {
            "backend": LOCAL,
            "session_id": self._info.id,
            "model": e.adapter.name,
            "model_kind": e.adapter.kind,
            "optimizer": self.optimizer,
            "muon_scaling": e.optim.muon_scaling,
            "ns_dtype": e.meta["ns_dtype"] if self.optimizer == wire.MUON else None,
            "param_split": e.optim.split.as_config() if self.optimizer == wire.MUON else None,
            "seed": self.seed,
            "device": str(self.device),
            "dtype": str(next(e.trainer.parameters()).dtype).removeprefix("torch."),
            "lora": e.meta["lora"],
            "resume_from": self._info.resume_from_checkpoint_id,
            **assembly.recorded(self._reopen),
            **self._threads.config(),
            "compile": e.compiler is not None,
            **({"compiles": list(e.compiler.compiles)} if e.compiler is not None and e.compiler.compiles else {}),
        }

    def close(self, timeout: float | None = None) -> None:
        """Stop the session: a running sample stops between tokens, anything else running finishes,
        queued operations fail ``SESSION_NOT_ACTIVE``."""
        if not self._worker.closed:
            self._info.status = wire.SessionStatus.STOPPED
            self._info.updated_at = datetime.now(UTC)
        done = self._worker.close(timeout)
        self._threads.close()
        if done:  # nothing runs that could still save there
            self.engine.store.close()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued operation has finished; False if ``timeout`` passed first."""
        return self._worker.wait_idle(timeout)
