"""Issue 20: the torch ops a local step runs besides the model's maths. Counted (deterministic, load-proof): the
engine's forward-backward and optim-step handlers on this thread, against a bare torch loop of the same maths
(``bench/bench_optim.py --overhead``'s ``BareLoop``: log-probs, summed loss, grad norm, clipping, AdamW)."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb.engine import handlers
from rlnb.engine.models.tiny import build_model
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.params import ADAM_DEFAULTS, AdamHyperparams
from rlnb.testing.ops import OpCounter

pytestmark = pytest.mark.slow  # builds a session and runs a few steps of a model

TEXT = list(b"hello world, this is a training step of rlnb")
EXTRA = -31
"""Ops a step may run past the bare loop's: 50 before issue 20's second cut (a float64 copy of the ids and 8 ops to
check they are whole, 4 more and 2 host syncs for their range, the clip factor computed twice, an unused mask for
cross-entropy), 29 after (the loss's weights, its metrics, the sample's tensors, the loss's and inputs' finiteness
checks), 33 since the entropy is computed only at the tokens the loss counts (the sample's 0/1 mask and the check
that it counts every position, which spares this sample the selection of its positions), 24 since that check serves
the loss too (a sample whose every weight counts skips the ``where`` that keeps a 0 weight's -inf log-prob out, 2 ops
forward and 2 backward), the summary reads that mask instead of a copy, and the loss's value and the entropy skip a
``detach`` and a one-chunk ``split``; -33 since AdamW reads its weights' step counts in one op where torch's reads
each twice (``rlnb.engine.optim.adamw``: 58 ``.item()`` a step, the bare loop's still): the bound leaves room for a
check, not for those costs to return."""


def bare_step(model: torch.nn.Module, opt: torch.optim.Optimizer, idx: torch.Tensor, tgt: torch.Tensor) -> None:
    lp = torch.log_softmax(model(idx).float(), -1).gather(-1, tgt[..., None])[..., 0]
    (-lp.sum()).backward()
    params = list(model.parameters())
    total = torch.nn.utils.get_total_norm([p.grad for p in params])
    total.item()
    torch.nn.utils.clip_grads_with_norm_(params, 1.0, total)
    opt.step()
    for p in params:
        p.grad = None


def test_a_local_step_runs_few_torch_ops_past_a_bare_loop(tmp_path):
    session = rlnb.connect("local", model="tiny", device="cpu", runs_dir=str(tmp_path), record=False, threads=1)
    try:
        engine, cancelled = session.backend.engine, threading.Event()
        fb = wire.ForwardBackwardBody(
            samples=[samples.cross_entropy(TEXT)], loss=wire.loss_config("cross_entropy", None)
        )
        step = wire.OptimStepBody.model_construct(adam_params=rlnb.AdamParams(learning_rate=1e-3))

        def engine_step() -> None:
            handlers.run(engine, wire.OperationKind.FORWARD_BACKWARD, fb, cancelled)
            handlers.run(engine, wire.OperationKind.OPTIM_STEP, step, cancelled)

        engine_step()  # the optimizer's state made
        with OpCounter() as ours:
            engine_step()
    finally:
        session.close()
    model = build_model("tiny", 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=True)
    idx, tgt = torch.tensor([TEXT[:-1]]), torch.tensor([TEXT[1:]])
    bare_step(model, opt, idx, tgt)
    with OpCounter() as bare:
        bare_step(model, opt, idx, tgt)
    extra = sum(ours.ops.values()) - sum(bare.ops.values())
    assert sum(bare.ops.values()) > 100  # the modes saw both steps
    assert extra <= EXTRA, (extra, ours.ops - bare.ops)


@pytest.mark.parametrize("ratio", [0.5, 0.999, 1.0, 1.0000001, 1.05, 1.1, 1.2, 1e30])
def test_the_clip_skipped_in_python_leaves_what_torch_clip_leaves(ratio):
    """A step skips the clip factor's ops where ``max_norm`` is well above the norm: the gradients and the reported
    factor are still ``clip_grads_with_norm_``'s, bit for bit, on both sides of that margin."""
    model = build_model("tiny", 0)
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    twin = copy.deepcopy(model)  # the same gradients, clipped by torch
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        q.grad = p.grad.clone()
    norm = torch.nn.utils.get_total_norm([p.grad for p in twin.parameters()])
    max_norm = float(norm) * ratio
    stats = TrainerOptimizer(model, "adam").step(AdamHyperparams(**{**ADAM_DEFAULTS, "grad_clip_norm": max_norm}))
    torch.nn.utils.clip_grads_with_norm_(twin.parameters(), max_norm, norm)
    assert stats.clip_coef == torch.clamp(max_norm / (norm + 1e-6), max=1.0).item()
    assert stats.clipped == (ratio < 1)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


SYNCS = {"item": 3, "tolist": 2, "__bool__": 1, "__float__": 1}
"""A local step's reads of a tensor's values on the host (a guard, issue 20 §3): the forward-backward's input
finiteness check (``float``), whether every position counts (``bool``), the loss's metrics (one ``tolist``) and its
value (``item``); the optim-step's gradient norm and clip factor (``item``) and AdamW's step counts (one ``tolist``).
On a CPU each costs ~0.2 us, and merging two costs a ``cat`` or ``stack`` op (~10 us): merged only for a GPU."""


def test_a_local_step_reads_the_host_seven_times(monkeypatch):
    """Guard: a step's host reads stay ``SYNCS`` (the clip factor's too: a gradient norm past the clip)."""
    session = rlnb.connect("local", model="tiny", device="cpu", record=False, threads=1)
    seen: dict[str, int] = dict.fromkeys(SYNCS, 0)
    try:
        engine, cancelled = session.backend.engine, threading.Event()
        fb = wire.ForwardBackwardBody(
            samples=[samples.cross_entropy(TEXT)], loss=wire.loss_config("cross_entropy", None)
        )
        clipped = rlnb.AdamParams(learning_rate=1e-3, grad_clip_norm=1e-6)
        step = wire.OptimStepBody.model_construct(adam_params=clipped)

        def engine_step() -> None:
            handlers.run(engine, wire.OperationKind.FORWARD_BACKWARD, fb, cancelled)
            handlers.run(engine, wire.OperationKind.OPTIM_STEP, step, cancelled)

        engine_step()  # the optimizer's state made
        for name in SYNCS:
            read = getattr(torch.Tensor, name)
            monkeypatch.setattr(
                torch.Tensor, name, lambda t, *a, _n=name, _r=read: seen.update({_n: seen[_n] + 1}) or _r(t, *a)
            )
        engine_step()
        monkeypatch.undo()
    finally:
        session.close()
    assert seen == SYNCS
