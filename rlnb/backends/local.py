"""The in-process backend: Together's training-session semantics on a local torch model.

A ``LocalBackend`` is one training session. It owns two copies of the model: the *trainer*, which
forward-backward and optim-step change, and the *sampler*, which only weights-sync updates — so
sampling before a weights-sync sees the old policy, exactly as on the service. Operations run on
one worker thread, strictly in submission order, with real PENDING → RUNNING → COMPLETED / FAILED
transitions. Gradients accumulate across forward-backward calls until the next optim-step.

Failure codes follow the API: bad inputs → ``INVALID_INPUT``; a non-finite loss or gradient →
``NON_FINITE_LOSS`` with parameters and optimizer state untouched (the offending gradients are
dropped); anything unexpected → ``INTERNAL_ERROR``; operations left when the session closes →
``SESSION_NOT_ACTIVE``.
"""

from __future__ import annotations

import copy
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from rlnb import params as params_mod
from rlnb import wire
from rlnb.backends import Listener, OptimizerKind
from rlnb.backends import losses as losses_mod
from rlnb.backends.lora import LoraSettings, adapter_state_dict, apply_lora, merged_state_dict
from rlnb.backends.model import SIZES, build_model
from rlnb.backends.optim import NonFiniteGradient, TrainerOptimizer

DEFAULT_MAX_TOKENS = 16
"""Sampling default for ``max_tokens`` (the built-in models have a 64-token context)."""
MAX_NUM_SAMPLES = 256
"""Completions per prompt in one sample operation."""
MIN_TEMPERATURE = 1e-5
"""Below this, sampling is greedy (dividing logits by a tinier temperature overflows)."""

class OperationError(Exception):
    """Raised inside a handler to end the operation FAILED with ``code``."""

    def __init__(self, code: str, message: str):
        self.code = wire.error_code(code)
        super().__init__(message)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks CUDA when available, else CPU."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Job:
    kind: str
    body: Any
    env: wire.Operation[Any]
    listener: Listener


class LocalBackend:
    """One training session on an in-process torch model.

    Args:
        optimizer: ``"adam"`` or ``"muon"``; fixed for the session's life, as on the service.
        model: a built-in size name (``"tiny"``, ``"small"``) or any ``nn.Module`` mapping token ids
            ``[T]`` / ``[B, T]`` to logits ``[..., vocab]``.
        seed: seeds the model's initial weights and unseeded sampling.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ...
        muon_scaling: ``"original"`` (lr in spectral-norm units, KJ's 0.02) or ``"match_adam"``.
        num_generator_replicas: 0 makes a trainer-only session that rejects ``sample``.
        checkpoint_dir: where checkpoints are written (default: a fresh temporary folder).
        resume_from: a checkpoint file to start from (training or inference).
        load_optimizer: with a training checkpoint, unset/True restores optimizer state and step;
            False loads weights only, with a fresh optimizer at step 0. Invalid for inference ones.
        eos_token_id: a token that ends a sampled sequence (``STOP_REASON_STOP``).
        decode: maps token ids to text for ``stop`` strings; default: bytes for ids < 256.
        op_delay: extra seconds each operation takes (simulates remote compute in benchmarks).
        lora: ``None``/``False`` trains all weights; ``True`` or a LoRA config dict (rank, alpha,
            dropout, seed, train_unembed) freezes them and trains adapters on the linear layers.
    """

    def __init__(
        self,
        optimizer: OptimizerKind = "adam",
        model: str | nn.Module = "tiny",
        *,
        seed: int = 0,
        device: str | torch.device = "auto",
        muon_scaling: Literal["original", "match_adam"] = "original",
        num_generator_replicas: int = 1,
        checkpoint_dir: str | Path | None = None,
        resume_from: str | Path | None = None,
        load_optimizer: bool | None = None,
        eos_token_id: int | None = None,
        decode: Callable[[list[int]], str] | None = None,
        op_delay: float = 0.0,
        lora: bool | dict[str, Any] | None = None,
    ):
        if optimizer not in wire.OPTIMIZERS:
            raise ValueError(f"optimizer must be 'adam' or 'muon', got {optimizer!r}")
        self.optimizer: OptimizerKind = optimizer
        self.device = resolve_device(device)
        self.seed = seed
        if isinstance(model, str):
            if model not in SIZES:
                raise ValueError(f"model must be one of {sorted(SIZES)} or an nn.Module, got {model!r}")
            self.base_model = f"rlnb/{model}"
            model = build_model(model, seed)
        else:
            self.base_model = f"custom/{type(model).__name__}"
        self.trainer = model.to(self.device).train()
        self.vocab_size, self.block_size = _probe(self.trainer, self.device)
        self.lora = LoraSettings.from_config(lora) if lora else None
        if self.lora is not None:
            heads = [
                m for m in self.trainer.modules() if isinstance(m, nn.Linear) and m.out_features == self.vocab_size
            ]
            self.lora_layers = apply_lora(self.trainer, self.lora, head=heads[-1] if heads else None)
        self.sampler = copy.deepcopy(self.trainer).eval().requires_grad_(False)
        self.optim = TrainerOptimizer(self.trainer, optimizer, self.vocab_size, muon_scaling=muon_scaling)
        self.num_generator_replicas = num_generator_replicas
        self.eos_token_id = eos_token_id
        self.decode = decode or _byte_decode
        self.op_delay = op_delay
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.step = 0
        self.weights_version = 0
        self._sample_rng = torch.Generator().manual_seed(seed)
        created = _now()
        self._info = wire.Session(
            id=f"local-{uuid.uuid4()}",
            status="TRAINING_SESSION_STATUS_RUNNING",
            base_model=self.base_model,
            model_resources_id="local",
            created_by="local",
            created_at=created,
            updated_at=created,
        )
        if self.lora is not None:
            self._info.lora_config = wire.LoraConfig(**vars(self.lora))
        self._checkpoints: dict[str, Path] = {}
        if resume_from is not None:
            self._resume(Path(resume_from), load_optimizer)
            self._info.resume_from_checkpoint_id = Path(resume_from).stem
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, name=f"rlnb-{self._info.id}", daemon=True)
        self._worker.start()

    # -- Backend protocol ------------------------------------------------------------------------

    def submit(self, kind: str, body: wire._Model | None, listener: Listener) -> None:
        if kind not in wire.REQUEST_TYPES:
            raise ValueError(f"unknown operation kind {kind!r}")
        env: wire.Operation[Any] = wire.Operation(id=str(uuid.uuid4()), status="TRAINING_OPERATION_STATUS_PENDING")
        job = _Job(kind, body, env, listener)
        with self._lock:
            listener(env)
            if self._closed:
                self._finish(job, error=("SESSION_NOT_ACTIVE", "the session is stopped"))
                return
            self._queue.put(job)

    def session(self) -> wire.Session:
        info = self._info.model_copy(deep=True)
        info.step = self.step
        info.policy_state = wire.PolicyState(
            applied_weights_version=self.weights_version,
            target_weights_version=self.weights_version,
            trainer_step=self.step,
        )
        return info

    def config(self) -> dict[str, Any]:
        return {
            "backend": "local",
            "session_id": self._info.id,
            "model": self.base_model,
            "optimizer": self.optimizer,
            "muon_scaling": self.optim.muon_scaling,
            "seed": self.seed,
            "device": str(self.device),
            "lora": vars(self.lora) if self.lora else None,
            "resume_from": self._info.resume_from_checkpoint_id,
        }

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._info.status = "TRAINING_SESSION_STATUS_STOPPED"
            self._info.updated_at = _now()
            self._queue.put(None)
        self._worker.join()

    def wait_idle(self, timeout: float | None = None) -> None:
        """Block until every queued operation has finished."""
        done = threading.Event()
        self._queue.put(
            _Job("_barrier", done, wire.Operation(id="", status="TRAINING_OPERATION_STATUS_PENDING"), lambda env: None)
        )
        done.wait(timeout)

    # -- worker ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                break
            if job.kind == "_barrier":
                job.body.set()
                continue
            if self._closed:  # stopped while this waited in the queue: it never runs
                self._finish(job, error=("SESSION_NOT_ACTIVE", "the session was stopped before this ran"))
                continue
            job.env = job.env.model_copy(update={"status": "TRAINING_OPERATION_STATUS_RUNNING"})
            job.listener(job.env)
            try:
                if self.op_delay:
                    time.sleep(self.op_delay)
                output = getattr(self, "_op_" + job.kind.replace("-", "_"))(job.body)
            except OperationError as exc:
                self._finish(job, error=(exc.code, str(exc)))
            except losses_mod.InvalidLossInput as exc:
                self._finish(job, error=("INVALID_INPUT", str(exc)))
            except Exception as exc:  # noqa: BLE001 - any other failure is the op's, not the worker's
                self._finish(job, error=("INTERNAL_ERROR", f"{type(exc).__name__}: {exc}"))
            else:
                self._finish(job, output=output)

    def _finish(self, job: _Job, output: Any = None, error: tuple[str, str] | None = None) -> None:
        if error is not None:
            update = {
                "status": "TRAINING_OPERATION_STATUS_FAILED",
                "error": wire.OperationError(code=wire.error_code(error[0]), message=error[1]),
            }
        else:
            update = {"status": "TRAINING_OPERATION_STATUS_COMPLETED", "output": output}
        job.env = job.env.model_copy(update=update)
        job.listener(job.env)

    # -- forward-backward ------------------------------------------------------------------------

    def _tokens(self, model_input: wire.ModelInput, where: str) -> list[int]:
        tokens = model_input.tokens
        if not tokens:
            raise OperationError("INVALID_INPUT", f"{where}: model_input has no tokens")
        if len(tokens) > self.block_size:
            raise OperationError(
                "INVALID_INPUT", f"{where}: {len(tokens)} tokens exceed the model's context of {self.block_size}"
            )
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise OperationError(
                "INVALID_INPUT", f"{where}: token {bad[0]} is outside the vocabulary [0, {self.vocab_size})"
            )
        return tokens

    def _inputs(self, samples: list[wire.Sample]) -> tuple[list[list[int]], list[dict[str, torch.Tensor]]]:
        if not samples:
            raise OperationError("INVALID_INPUT", "samples is empty")
        seqs, inputs = [], []
        for i, s in enumerate(samples):
            seqs.append(self._tokens(s.model_input, f"samples[{i}]"))
            tensors = {}
            for key, td in s.loss_fn_inputs.items():
                if td.dtype == "int64":
                    if any(not float(v).is_integer() for v in td.data):
                        raise OperationError(
                            "INVALID_INPUT", f"samples[{i}].loss_fn_inputs.{key}: int64 data must be integers"
                        )
                    tensors[key] = torch.tensor([int(v) for v in td.data], dtype=torch.int64)
                else:
                    tensors[key] = torch.tensor(td.data, dtype=torch.float32)
            inputs.append(tensors)
        return seqs, inputs

    def _logprobs(self, model: nn.Module, seqs: list[list[int]], targets: list[torch.Tensor]) -> list[torch.Tensor]:
        """Log-prob of each target token, one 1-D tensor per sample. Sequences are right-padded into
        one batch: with causal attention, padding after a sequence cannot change its positions."""
        lens = [len(s) for s in seqs]
        T = max(lens)
        idx = torch.zeros(len(seqs), T, dtype=torch.long)
        tgt = torch.zeros(len(seqs), T, dtype=torch.long)
        for b, (s, t) in enumerate(zip(seqs, targets, strict=True)):
            idx[b, : len(s)] = torch.tensor(s)
            tgt[b, : len(s)] = t
        logits = model(idx.to(self.device))  # (B, T, V)
        lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tgt.to(self.device)[..., None])[..., 0]
        return [lp[b, :n].cpu() if self.device.type != "cpu" else lp[b, :n] for b, n in enumerate(lens)]

    def _op_forward_backward(self, body: wire.ForwardBackwardBody) -> wire.ForwardBackwardResult:
        loss_type = body.loss.type
        if loss_type not in losses_mod.LOSS_TYPES:
            raise OperationError("INVALID_INPUT", f"loss.type must be one of {', '.join(losses_mod.LOSS_TYPES)}")
        field = wire.LOSS_PARAMS_FIELD[loss_type]
        given = getattr(body.loss, field) if field else None
        loss_params = given.model_dump(exclude_none=True) if given is not None else None
        seqs, inputs = self._inputs(body.samples)
        loss_params = losses_mod.validate(loss_type, loss_params, inputs, [len(s) for s in seqs])
        for i, x in enumerate(inputs):
            t = x["target_tokens"]
            if t.numel() and (t.min() < 0 or t.max() >= self.vocab_size):
                raise OperationError(
                    "INVALID_INPUT", f"samples[{i}].loss_fn_inputs.target_tokens: ids must be in [0, {self.vocab_size})"
                )
        forward_only = bool(body.forward_only)
        with torch.set_grad_enabled(not forward_only):
            lps = self._logprobs(self.trainer, seqs, [x["target_tokens"] for x in inputs])
            loss, metrics = losses_mod.compute(loss_type, loss_params, lps, inputs, horizon=self.block_size)
        value = float(loss.detach())
        if not math.isfinite(value):
            raise OperationError("NON_FINITE_LOSS", f"loss is {value}; no gradients were accumulated")
        if not forward_only:
            loss.backward()
        outputs = None
        if body.return_loss_fn_outputs:
            outputs = [
                wire.LossFnOutput(
                    tensors={
                        "logprobs": wire.TensorData(
                            data=(lp.detach() * losses_mod.loss_mask(loss_type, x)).tolist(), dtype="float32"
                        )
                    }
                )
                for lp, x in zip(lps, inputs, strict=True)
            ]
        return wire.ForwardBackwardResult(loss=value, metrics=metrics, loss_fn_outputs=outputs)

    def _op_custom_forward_backward(self, body: wire.CustomForwardBackwardBody) -> wire.CustomForwardBackwardResult:
        seqs, inputs = self._inputs(body.samples)
        if len(body.gradients) != len(seqs):
            raise OperationError(
                "INVALID_INPUT", f"gradients has {len(body.gradients)} entries for {len(seqs)} samples"
            )
        grads = []
        for i, (s, g, x) in enumerate(zip(seqs, body.gradients, inputs, strict=True)):
            if "target_tokens" not in x:
                raise OperationError("INVALID_INPUT", f"samples[{i}].loss_fn_inputs.target_tokens is required")
            if len(g.data) != len(s):
                raise OperationError("INVALID_INPUT", f"gradients[{i}] has {len(g.data)} values for {len(s)} tokens")
            mask = x.get("weights", x.get("mask"))
            grads.append(torch.tensor(g.data) * ((mask != 0).float() if mask is not None else 1.0))
        lps = self._logprobs(self.trainer, seqs, [x["target_tokens"] for x in inputs])
        surrogate = torch.stack([(lp * g.to(lp.device)).sum() for lp, g in zip(lps, grads, strict=True)]).sum()
        surrogate.backward()  # d surrogate / d lp = g, so the model receives exactly the caller's gradients
        return wire.CustomForwardBackwardResult()

    # -- optim-step ------------------------------------------------------------------------------

    def _op_optim_step(self, body: wire.OptimStepBody) -> wire.OptimStepResult:
        mine, other = ("adam_params", "muon_params") if self.optimizer == "adam" else ("muon_params", "adam_params")
        if getattr(body, mine) is None and getattr(body, other) is not None:
            raise OperationError(
                "INVALID_INPUT", f"this session's optimizer is {self.optimizer}: send {mine}, not {other}"
            )
        hp = params_mod.resolve(self.optimizer, body)
        try:
            stats = self.optim.step(hp)
        except NonFiniteGradient as exc:
            self.optim.zero_grad()
            raise OperationError(
                "NON_FINITE_LOSS", f"gradient norm is {exc.grad_norm}; parameters and optimizer state unchanged"
            ) from None
        self.optim.zero_grad()
        self.step += 1
        metrics = {
            "grad_norm": stats.grad_norm,
            "grad_clip_norm": hp["grad_clip_norm"],
            "clip_coef": stats.clip_coef,
            "learning_rate": stats.learning_rate,
        }
        if stats.grad_norm_muon is not None:
            metrics["grad_norm/muon"] = stats.grad_norm_muon
        if stats.grad_norm_adam is not None:
            metrics["grad_norm/adam"] = stats.grad_norm_adam
        if stats.adam_learning_rate is not None:
            metrics["adam/learning_rate"] = stats.adam_learning_rate
        return wire.OptimStepResult(step=self.step, metrics=metrics)

    # -- weights-sync and sample -----------------------------------------------------------------

    def _op_weights_sync(self, body: wire.WeightsSyncBody) -> wire.WeightsSyncResult:
        with torch.no_grad():
            for dst, src in zip(self.sampler.parameters(), self.trainer.parameters(), strict=True):
                dst.copy_(src)
            for buf, src_buf in zip(self.sampler.buffers(), self.trainer.buffers(), strict=True):
                buf.copy_(src_buf)
        self.weights_version = self.step
        return wire.WeightsSyncResult(weights_version=self.weights_version)

    @torch.no_grad()
    def _op_sample(self, body: wire.SampleBody) -> wire.SampleOutput:
        if self.num_generator_replicas == 0:
            raise OperationError(
                "INVALID_INPUT", "this session is trainer-only (0 generator replicas): sample is rejected"
            )
        sp = body.sampling_params or wire.SamplingParams()
        n = body.num_samples or 1
        if n > MAX_NUM_SAMPLES:
            raise OperationError("INVALID_INPUT", f"num_samples must be <= {MAX_NUM_SAMPLES}, got {n}")
        max_tokens = sp.max_tokens or DEFAULT_MAX_TOKENS
        temperature = 1.0 if sp.temperature is None else sp.temperature
        top_p = 1.0 if sp.top_p is None else sp.top_p
        top_k = -1 if sp.top_k is None else sp.top_k
        if sp.seed is not None:
            gen = torch.Generator().manual_seed(sp.seed % 2**63)
        else:
            gen = torch.Generator().manual_seed(int(torch.randint(2**62, (1,), generator=self._sample_rng)))
        results = []
        for i, mi in enumerate(body.model_inputs):
            prompt = self._tokens(mi, f"model_inputs[{i}]")
            if len(prompt) + max_tokens > self.block_size:
                raise OperationError(
                    "INVALID_INPUT",
                    f"model_inputs[{i}]: {len(prompt)} prompt tokens + max_tokens {max_tokens} "
                    f"exceed the model's context of {self.block_size}",
                )
            seqs = self._generate(prompt, n, max_tokens, temperature, top_p, top_k, sp.stop or [], gen)
            result = wire.SampleResult(
                policy_segments=[wire.PolicyVersionSegment(start_token=0, version=self.weights_version)],
                sequences=seqs,
            )
            if body.prompt_logprobs or body.topk_prompt_logprobs:
                self._prompt_logprobs(prompt, result, body.topk_prompt_logprobs or 0)
            results.append(result)
        return wire.SampleOutput(results=results)

    def _generate(
        self,
        prompt: list[int],
        n: int,
        max_tokens: int,
        temperature: float,
        top_p: float,
        top_k: int,
        stop: list[str],
        gen: torch.Generator,
    ) -> list[wire.SampledSequence]:
        x = torch.tensor([prompt] * n, device=self.device)  # (n, P)
        out: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        done = [False] * n
        reason: list[wire.StopReason] = ["STOP_REASON_LENGTH"] * n
        for _ in range(max_tokens):
            logits = self.sampler(x)[:, -1, :].float().cpu()  # (n, V)
            logp = torch.log_softmax(logits, dim=-1)
            nxt = _choose(logits, temperature, top_p, top_k, gen)  # (n,)
            for b in range(n):
                if done[b]:
                    continue
                tok = int(nxt[b])
                out[b].append(tok)
                lps[b].append(float(logp[b, tok]))
                if tok == self.eos_token_id or (stop and any(s in self.decode(out[b]) for s in stop)):
                    done[b], reason[b] = True, "STOP_REASON_STOP"
            if all(done):
                break
            x = torch.cat([x, nxt[:, None].to(self.device)], dim=1)
        return [
            wire.SampledSequence(tokens=o, logprobs=lp, stop_reason=r, prompt_cache_hit_tokens=0)
            for o, lp, r in zip(out, lps, reason, strict=True)
        ]

    def _prompt_logprobs(self, prompt: list[int], result: wire.SampleResult, k: int) -> None:
        logp = torch.log_softmax(self.sampler(torch.tensor(prompt, device=self.device)).float().cpu(), dim=-1)
        result.prompt_logprobs = [0.0] + [float(logp[j - 1, prompt[j]]) for j in range(1, len(prompt))]
        if k:
            top = logp.topk(min(k, self.vocab_size), dim=-1)
            result.topk_prompt_logprobs = [wire.PromptTopLogprobs()] + [
                wire.PromptTopLogprobs(token_ids=top.indices[j - 1].tolist(), logprobs=top.values[j - 1].tolist())
                for j in range(1, len(prompt))
            ]

    # -- checkpoints -----------------------------------------------------------------------------

    def _checkpoint_path(self, ckpt_id: str) -> Path:
        if self.checkpoint_dir is None:
            import tempfile

            self.checkpoint_dir = Path(tempfile.mkdtemp(prefix="rlnb-checkpoints-"))
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        return self.checkpoint_dir / f"{ckpt_id}.pt"

    def _op_training_checkpoint(self, body: None) -> wire.TrainingCheckpointResult:
        ckpt = wire.TrainingCheckpoint(id=f"ckpt-train-{uuid.uuid4().hex[:12]}", step=self.step, created_at=_now())
        path = self._checkpoint_path(ckpt.id)
        torch.save(
            {
                "type": "training",
                "model": self.trainer.state_dict(),
                "optimizer": self.optim.state_dict(),
                "step": self.step,
                "base_model": self.base_model,
            },
            path,
        )
        self._checkpoints[ckpt.id] = path
        self._info.training_checkpoints.append(ckpt)
        return wire.TrainingCheckpointResult(checkpoint=ckpt)

    def _op_inference_checkpoint(self, body: None) -> wire.InferenceCheckpointResult:
        ckpt = wire.InferenceCheckpoint(id=f"ckpt-infer-{uuid.uuid4().hex[:12]}", step=self.step, created_at=_now())
        path = self._checkpoint_path(ckpt.id)
        meta = {"type": "inference", "step": self.step, "base_model": self.base_model}
        torch.save({**meta, "model": merged_state_dict(self.trainer)}, path)  # MERGED: the full model
        if self.lora is not None:  # ADAPTER: the LoRA weights only, in a file of their own
            torch.save({**meta, "adapter": adapter_state_dict(self.trainer)}, path.with_suffix(".adapter.pt"))
        self._checkpoints[ckpt.id] = path
        self._info.inference_checkpoints.append(ckpt)
        return wire.InferenceCheckpointResult(checkpoint=ckpt)

    def checkpoint_path(self, ckpt_id: str) -> Path:
        """The file a checkpoint of this session was written to."""
        if ckpt_id not in self._checkpoints:
            raise KeyError(f"no checkpoint {ckpt_id!r} in this session")
        return self._checkpoints[ckpt_id]

    def checkpoint_files(self, ckpt_id: str, variant: str) -> list[Path]:
        """The files of an inference checkpoint: ``"merged"`` (the full model, adapters folded in) or
        ``"adapter"`` (the LoRA weights only; LoRA sessions). ``KeyError`` / ``ValueError`` otherwise."""
        path = self.checkpoint_path(ckpt_id)
        if variant == "merged":
            return [path]
        adapter = path.with_suffix(".adapter.pt")
        if variant != "adapter" or not adapter.exists():
            raise ValueError(f"checkpoint {ckpt_id} has no {variant!r} variant")
        return [adapter]

    def _resume(self, path: Path, load_optimizer: bool | None) -> None:
        state = torch.load(path, map_location=self.device, weights_only=True)
        if state["type"] != "training" and self.lora is not None:
            raise ValueError("a LoRA session resumes from a training checkpoint, not an inference checkpoint")
        self.trainer.load_state_dict(state["model"])
        self.sampler.load_state_dict(state["model"])
        if state["type"] != "training":
            if load_optimizer:
                raise ValueError("load_optimizer applies only to training checkpoints; this is an inference checkpoint")
        elif load_optimizer is not False:
            self.optim.load_state_dict(state["optimizer"])
            self.step = self.weights_version = int(state["step"])


def _probe(model: nn.Module, device: torch.device) -> tuple[int, int]:
    """Vocabulary size and context length of a model that maps token ids to logits."""
    block = getattr(getattr(model, "config", None), "block_size", None) or getattr(model, "block_size", None)
    with torch.no_grad():
        logits = model(torch.zeros(1, 1, dtype=torch.long, device=device))
    if logits.dim() != 3 or logits.shape[:2] != (1, 1):
        raise ValueError(f"model must map token ids [B, T] to logits [B, T, vocab]; got shape {tuple(logits.shape)}")
    return int(logits.shape[-1]), int(block or 1024)


def _byte_decode(tokens: list[int]) -> str:
    return bytes(t for t in tokens if 0 <= t < 256).decode("utf-8", errors="replace")


def _choose(logits: torch.Tensor, temperature: float, top_p: float, top_k: int, gen: torch.Generator) -> torch.Tensor:
    """Next token per row: greedy at temperature 0, else top-k / top-p filtered sampling."""
    if temperature < MIN_TEMPERATURE:
        return logits.argmax(-1)
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p < 1.0:
        probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)
        drop = probs.cumsum(-1) - probs > top_p  # keep the smallest prefix whose mass reaches top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), -math.inf)
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen)[:, 0]
