"""A request's inputs, checked and turned into tensors before any compute (``rlnb.engine.handlers``).

Apart from the handlers because every kind that reads tokens shares these checks, and each error names
the request's field: a bad request fails whole, before it can leave half-accumulated gradients. A sample request's
own checks (sampling params, ``num_samples``, prompts that leave room) are ``rlnb.engine.sample_inputs``.

A sample changed after it was built (a list item set later) or made by ``model_construct`` skips the wire's checks:
a float id would reach the embedding (``INTERNAL_ERROR``), a bool or 2.0 read as an id in silence. Lists are checked
in C passes (``wire.lists.only``: every item exactly an ``int``, or a ``float``), and only a list that fails them goes
item by item, to name the first bad one or let a numpy number through.
"""

from __future__ import annotations

import numbers
import operator
from itertools import repeat

import torch
from torch import Tensor, nn

from rlnb import wire
from rlnb.engine import losses as losses_mod
from rlnb.engine import refusals
from rlnb.engine.memory import refuse_past_free
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.refusals import check_target_ids, check_tokens, must_be, no_routing_key
from rlnb.errors import OperationError
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire.inputs import not_int64
from rlnb.wire.lists import only
from rlnb.wire.loss_params import FLOAT32_MAX

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def read_samples(adapter: ModelAdapter, samples: list[wire.Sample]) -> tuple[list[list[int]], list[dict[str, Tensor]]]:
    """Each sample's checked tokens and its ``loss_fn_inputs`` as tensors (int64 ids checked in range)."""
    if not samples:
        raise OperationError(Code.INVALID_INPUT, "samples is empty")
    seqs, inputs = [], []
    vocab = adapter.vocab_size
    for i, s in enumerate(samples):
        if not isinstance(s, wire.Sample):  # a crafted body's dict: else AttributeError, INTERNAL_ERROR
            must_be(s, wire.Sample, f"samples[{i}]")
        tokens = model_tokens(s.model_input, f"samples[{i}].model_input")
        if not isinstance(s.loss_fn_inputs, dict):  # tested here, named by ``must_be``: a call a sample less
            must_be(s.loss_fn_inputs, dict, f"samples[{i}].loss_fn_inputs")
        seqs.append(check_tokens(adapter, tokens, f"samples[{i}]"))
        if s.routed_experts_key is not None:
            raise no_routing_key(i)
        tensors = {}
        for key, td in s.loss_fn_inputs.items():
            where = f"samples[{i}].loss_fn_inputs.{key}"
            tensors[key] = read_tensor(td, where)
            if key == "target_tokens":
                check_target_ids(where, td, vocab)
        inputs.append(tensors)
    return seqs, inputs


def model_tokens(model_input: object, where: str) -> list[int]:
    """The tokens of ``model_input`` (``where``: the request's field), each part checked first: a crafted body's
    dict chunk would be ``AttributeError`` inside ``ModelInput.tokens``, so ``INTERNAL_ERROR``. The parts are checked in
    C passes; only a bad one goes part by part, to name it (that would be 5 Python calls a one-chunk input)."""
    chunks = getattr(model_input, "chunks", None)
    if not (isinstance(model_input, wire.ModelInput) and isinstance(chunks, list) and _well_formed(chunks)):
        _name_bad_part(model_input, where)
    return model_input.tokens  # type: ignore[attr-defined]  # checked just above


_TEXT, _TOKENS = operator.attrgetter("encoded_text"), operator.attrgetter("tokens")


def _well_formed(chunks: list[object]) -> bool:
    """Whether each chunk is a ``ModelInputChunk``, its ``encoded_text`` an ``EncodedText`` with a list of tokens."""
    if not all(map(isinstance, chunks, repeat(wire.ModelInputChunk))):
        return False
    texts = list(map(_TEXT, chunks))
    return all(map(isinstance, texts, repeat(wire.EncodedText))) and all(
        map(isinstance, map(_TOKENS, texts), repeat(list))
    )


def _name_bad_part(model_input: object, where: str) -> None:
    """``INVALID_INPUT`` naming the first part of ``model_input`` that is not what ``_well_formed`` asks."""
    must_be(model_input, wire.ModelInput, where)
    chunks = model_input.chunks  # type: ignore[attr-defined]  # checked just above
    must_be(chunks, list, f"{where}.chunks")
    for j, chunk in enumerate(chunks):
        must_be(chunk, wire.ModelInputChunk, f"{where}.chunks[{j}]")
        must_be(chunk.encoded_text, wire.EncodedText, f"{where}.chunks[{j}].encoded_text")
        must_be(chunk.encoded_text.tokens, list, f"{where}.chunks[{j}].encoded_text.tokens")


def read_tensor(td: wire.TensorData, where: str) -> Tensor:
    """``td`` as a 1-D tensor of its dtype, once its layout (``wire.TensorData.layout_problem``, the wire's own rules)
    and its elements are checked: numbers (no text, bool or ``None``), whole ones in int64's range for ``int64``.
    A tensor that skips the wire's validation (``model_construct``, a field set later) is not read loosely: text as
    ``INTERNAL_ERROR``, a bool a number, another dtype float32, ``shape`` and the sparse fields ignored.
    ``INVALID_INPUT`` naming ``where``."""
    if not isinstance(td, wire.TensorData):  # tested here, named by ``must_be``: a call a tensor less
        must_be(td, wire.TensorData, where)
    problem = td.layout_problem()
    if problem is not None:
        raise OperationError(Code.INVALID_INPUT, f"{where}: {problem}")
    return float32_tensor(td.data, where) if td.dtype == "float32" else _int64_tensor(td.data, where)


def _check_numbers(data: object, where: str) -> bool:
    """``INVALID_INPUT`` naming ``where`` unless ``data`` is a list of numbers (a numpy number is one; a bool is not),
    naming the first element that is no number. Whether it holds plain floats only (the wire's), so that
    ``_int64_tensor`` does not ask again."""
    if not isinstance(data, list):
        raise OperationError(Code.INVALID_INPUT, f"{where}: data must be a list of numbers, got {type(data).__name__}")
    if only(data, float):  # the wire's floats (``StrictFloat``)
        return True
    if only(data, int):  # a crafted body's ints
        return False
    odd = ((i, v) for i, v in enumerate(data) if not isinstance(v, numbers.Real) or isinstance(v, bool))
    at, bad = next(odd, (None, None))
    if at is not None:
        said = f"{bad!r} at position {at} is {type(bad).__name__}, expected a number"
        raise OperationError(Code.INVALID_INPUT, f"{where}: {said}")
    return False


def float32_tensor(data: list[float], where: str) -> Tensor:
    """``data`` as float32, once each element is a number (``_check_numbers``); one past float32's range is inf there,
    which the finiteness checks name. ``INVALID_INPUT`` naming ``where``."""
    _check_numbers(data, where)
    try:
        return torch.tensor(data, dtype=torch.float32)
    except (OverflowError, RuntimeError, ValueError):  # an integer past any float's range (10**400)
        said = f"float32 data holds a number past float32's range (+-{FLOAT32_MAX:.4g})"
        raise OperationError(Code.INVALID_INPUT, f"{where}: {said}") from None


def _int64_tensor(data: list[float], where: str) -> Tensor:
    """``data`` as int64, once each element is a whole number in int64's range. C passes over the list (``int``,
    ``==``, ``min``, ``max``), not torch ops: the wire's ids are floats, and a float64 tensor's checks take 9 ops and a
    host sync a sample (faster on 100k ids too: building a float64 tensor cost more than the passes)."""
    floats = _check_numbers(data, where)
    try:
        ids = list(map(int, data)) if floats or not only(data, int) else data  # NaN and inf raise
    except (OverflowError, ValueError):
        ids = None
    # a fraction (int() would drop it), NaN, inf, or out of range; the error made only then (a call a step), naming the
    # value as the wire's 400 names it (``wire.not_int64``)
    if ids is None or (ids is not data and ids != data) or (ids and (min(ids) < INT64_MIN or max(ids) > INT64_MAX)):
        raise OperationError(Code.INVALID_INPUT, f"{where}: {not_int64(data)}")
    return torch.tensor(ids, dtype=torch.int64)


def custom_gradients(
    seqs: list[list[int]], inputs: list[dict[str, Tensor]], gradients: list[wire.GradientTensor]
) -> list[Tensor]:
    """A custom forward-backward's gradients as float32 tensors, times the sample's weights (zero where its mask is),
    once its inputs are checked: one gradient per sample with one value per token; ``target_tokens`` and the mask
    checked by ``losses.check_input``, a forward-backward's own check (int64 ids of the sample's length: float ids would
    reach the log-prob gather, an ``INTERNAL_ERROR``); at most one of ``weights`` and ``mask`` (``losses.mask_key``,
    a forward-backward's own rule: here ``mask`` would be ignored). ``INVALID_INPUT`` naming the field,
    ``NON_FINITE_LOSS`` for a gradient that is not finite."""
    refusals.check_gradients(len(gradients), len(seqs))
    grads = []
    for i, (s, g, x) in enumerate(zip(seqs, gradients, inputs, strict=True)):
        where = f"samples[{i}].loss_fn_inputs"
        refusals.require_targets(where, x)
        losses_mod.check_input(f"{where}.target_tokens", "target_tokens", x["target_tokens"], len(s))
        grad = float32_tensor(g.data, f"gradients[{i}]")
        refusals.check_gradient_length(i, len(grad), len(s))
        key = losses_mod.mask_key(where, x)
        mask = x[key] if key is not None else None
        if key is not None:
            losses_mod.check_input(f"{where}.{key}", key, mask, len(s))
        if not torch.isfinite(grad).all():  # NaN, Inf, or past float32's range
            raise refusals.non_finite_gradient(i)
        # a weight multiplies its token's loss, as cross-entropy's: d(Σ w·ℓ)/d lp = w·g; a mask keeps or drops it
        grads.append(grad * (1.0 if mask is None else mask.float() if key == "weights" else (mask != 0).float()))
    return grads


def logprobs(
    adapter: ModelAdapter,
    model: nn.Module,
    seqs: list[list[int]],
    targets: list[Tensor],
    counted: list[Tensor] | None,
    whole: bool = False,
) -> tuple[list[Tensor], list[Tensor] | None]:
    """Log-prob of each target token, one 1-D tensor per sample, and the policy's entropy at the positions
    ``counted`` marks (one 0/1 mask per sample, ``losses.loss_mask``: the tokens its loss counts, the only ones
    ``loss/entropy/mean`` reads; 0 at the others), or None where ``counted`` is None (a custom forward-backward has
    no metrics): an entropy is V values of work a position, so prompts and padding cost none. ``whole``: every
    position of ``counted`` is 1 (``losses.counts_all``, which the caller asked once for this and the loss).
    Sequences are right-padded into one batch: with causal attention, padding after a sequence cannot
    change its positions."""
    lens = list(map(len, seqs))  # C calls, where comprehensions would be 2 Python calls a forward-backward
    width = max(lens)
    check_logits(len(seqs), width, adapter.vocab_size, adapter.device)
    padded = seqs if min(lens) == width else [s + [0] * (width - len(s)) for s in seqs]  # none to pad: no call
    idx = torch.tensor(padded, device=adapter.device)
    # each sample's positions before its padding: a few ops for the batch, where padding row by row would be 4 a sample
    valid = torch.arange(width) < torch.tensor(lens)[:, None] if len(seqs) > 1 else None
    tgt = targets[0][None] if valid is None else _padded(targets, valid)
    if counted is None:
        where: Tensor | None = torch.zeros(tgt.shape, dtype=torch.bool, device=adapter.device)
    else:
        # every position counted (no prompt, no padding): none to skip, so none to select
        if whole and min(lens) == width:
            where = None
        else:
            m = counted[0] if valid is None else _padded(counted, valid)
            where = (m != 0).reshape(tgt.shape).to(adapter.device)
    tgt = tgt.to(adapter.device)  # before the forward: a copy from the host waits for the device
    logits = adapter.forward(model, idx)  # (B, T, V)
    lp, entropy = losses_mod.logprobs_and_entropy(logits, tgt, where)
    if len(lens) == 1:
        return [lp[0].cpu()], None if counted is None else [entropy[0].cpu()]
    lps = [lp[b, :n].cpu() for b, n in enumerate(lens)]
    return lps, None if counted is None else [entropy[b, :n].cpu() for b, n in enumerate(lens)]


def _padded(rows: list[Tensor], valid: Tensor) -> Tensor:
    """1-D tensors (on the CPU) as the rows of one, 0 past each one's length: ``valid`` marks the positions before."""
    out = rows[0].new_zeros(valid.shape)
    out[valid] = torch.cat(rows)
    return out


LOGIT_BYTES = 8
"""Bytes per logit a forward-backward holds at least: float32 logits (or their float32 copy) and their log-softmax."""


LOGITS_CHECKED = 64 * 2**20
"""Logits under this many bytes are not checked against the free memory: no session runs with less free."""


def check_logits(rows: int, width: int, vocab: int, device: torch.device) -> None:
    """``RESOURCE_EXHAUSTED`` before the forward when the batch's logits alone (a lower bound of what it takes) would
    not fit the memory free now (``free_memory``): they would take what there is and fail once allocated, or, where
    Linux overcommits, get the process killed. A sample's KV cache has the same check (``memory.refuse_past_free``)."""
    need = rows * width * vocab * LOGIT_BYTES
    if need < LOGITS_CHECKED:  # reading free memory (/proc, the cgroup) on every step would cost ~0.2 ms
        return
    how = (f"{rows} samples x {width} tokens (the longest) x {vocab} logits x {LOGIT_BYTES} bytes: float32 logits and "
           "log-softmax")  # fmt: skip
    refuse_past_free(need, device, "this batch's logits", how, "send fewer or shorter samples at once")
