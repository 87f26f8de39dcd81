"""rlnb's policy losses against TRL 1.16 ``GRPOTrainer``: the gradient of each rlnb loss and option against
TRL's ``loss_type`` and flags (docs/losses.md has the table), on the same per-token log-probs.

``trl_loss`` re-implements ``GRPOTrainer._compute_loss`` (trl 1.16.0, trl/trainer/grpo_trainer.py) for one
process, one gradient-accumulation step and one iteration per generation, so it always runs; with ``trl``
installed (``pip install 'rlnb[trl]'``) the same cases also run TRL's own method. TRL holds completions
only, right-padded; rlnb's samples also carry prompt positions, masked, as ``samples.policy`` builds them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from rlnb.engine.losses import compute, validate

GRPO, CISPO = "LOSS_TYPE_GRPO", "LOSS_TYPE_CISPO"
TOKEN_MEAN, SEQUENCE_MEAN = "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN", "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN"
FIXED_HORIZON = "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON"
SEQUENCE = "GRPO_LOSS_RATIO_TYPE_SEQUENCE"
MAX_COMPLETION = 12  # TRL's max_completion_length; rlnb's FIXED_HORIZON constant set to it
PROMPT = 3  # masked prompt positions before each rlnb sample's completion
EPS_LOW, EPS_HIGH = 0.2, 0.28


@dataclass
class Case:
    """A TRL configuration and the rlnb loss that matches it; rlnb's gradient is ``scale`` x TRL's."""

    name: str
    trl: dict[str, Any]
    loss: str
    params: dict[str, Any] = field(default_factory=dict)
    scale: str = "1"


CLIP = {"clip_low_threshold": 1 - EPS_LOW, "clip_high_threshold": 1 + EPS_HIGH}
CASES = [
    Case("grpo", {"loss_type": "grpo"}, GRPO, {**CLIP, "agg_type": SEQUENCE_MEAN}),
    Case("bnpo", {"loss_type": "bnpo"}, GRPO, {**CLIP, "agg_type": TOKEN_MEAN}),
    Case("dapo", {"loss_type": "dapo"}, GRPO, {**CLIP, "agg_type": TOKEN_MEAN}),
    Case("dr_grpo", {"loss_type": "dr_grpo"}, GRPO, {**CLIP, "agg_type": FIXED_HORIZON}),
    Case(
        "gspo",
        {"loss_type": "grpo", "importance_sampling_level": "sequence"},
        GRPO,
        {**CLIP, "agg_type": SEQUENCE_MEAN, "ratio_type": SEQUENCE},
    ),
    Case("grpo kl", {"loss_type": "grpo", "beta": 0.04}, GRPO, {**CLIP, "agg_type": SEQUENCE_MEAN, "beta": 0.04}),
    Case("dapo kl", {"loss_type": "dapo", "beta": 0.04}, GRPO, {**CLIP, "agg_type": TOKEN_MEAN, "beta": 0.04}),
    Case(
        "dr_grpo kl, no bias correction",
        {"loss_type": "dr_grpo", "beta": 0.1, "use_bias_correction_kl": False},
        GRPO,
        {**CLIP, "agg_type": FIXED_HORIZON, "beta": 0.1, "use_bias_correction_kl": False},
    ),
    Case(
        "gspo kl",
        {"loss_type": "grpo", "importance_sampling_level": "sequence", "beta": 0.04},
        GRPO,
        {**CLIP, "agg_type": SEQUENCE_MEAN, "ratio_type": SEQUENCE, "beta": 0.04},
    ),
    Case(
        "cispo",
        {"loss_type": "cispo", "epsilon_high": 5.0},
        CISPO,
        {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0},
        scale="tokens",
    ),
]


VOCAB = 6


def batch(seed: int = 0):
    """Five completions of lengths 12, 7, 3, 9, 1 (right-padded), off-policy enough that every clip is hit. Each
    log-prob is a real one, ``log_softmax`` of a policy's logits at the token drawn: sampler, trainer and reference
    policies are the same random logits perturbed, so every value is <= 0 as the engine insists (a reference
    ``old + noise`` went above 0 on some seeds and was refused)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [12, 7, 3, 9, 1]
    B, T = len(lengths), max(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).double()
    tokens = torch.randint(VOCAB, (B, T, 1), generator=g)
    logits = torch.randn(B, T, VOCAB, generator=g, dtype=torch.float64) * 1.5

    def logprobs(noise: float) -> torch.Tensor:
        policy = logits + torch.randn(B, T, VOCAB, generator=g, dtype=torch.float64) * noise
        return torch.log_softmax(policy, -1).gather(-1, tokens).squeeze(-1)

    old, lp, ref = logprobs(0.0), logprobs(0.5), logprobs(0.4)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    return lengths, mask, old, lp, ref, adv


def trl_loss(cfg: dict[str, Any], lp, old, ref, adv, mask) -> torch.Tensor:
    """``GRPOTrainer._compute_loss`` of TRL 1.16.0, transcribed: one process, one accumulation step, no
    vLLM, no entropy mask, no off-policy mask, ``delta`` None."""
    loss_type, level = cfg["loss_type"], cfg.get("importance_sampling_level", "token")
    beta, eps_low = cfg.get("beta", 0.0), cfg.get("epsilon", EPS_LOW)
    eps_high = cfg.get("epsilon_high", EPS_HIGH)
    advantages = adv.unsqueeze(1)
    log_ratio = lp - old
    if level == "token":
        log_importance_weights = log_ratio
    else:
        log_importance_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    if beta != 0.0:
        per_token_kl = torch.exp(ref - lp) - (ref - lp) - 1
        if cfg.get("use_bias_correction_kl", True):
            per_token_kl = per_token_kl * coef_1
    if loss_type == "cispo":
        per_token_loss = -torch.clamp(coef_1, max=eps_high).detach() * advantages * lp
    else:
        coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
        per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.size(0) * MAX_COMPLETION)
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)  # dapo, cispo: / num_items_in_batch


def trl_own_loss(cfg: dict[str, Any], lp, old, ref, adv, mask) -> tuple[torch.Tensor, dict[str, list[float]]]:
    """TRL's own ``GRPOTrainer._compute_loss`` on a stand-in trainer whose model returns ``lp``."""
    from trl import GRPOTrainer

    accelerator = SimpleNamespace(
        num_processes=1, reduce=lambda t, reduction: t, gather=lambda t: t, gather_for_metrics=lambda t: t
    )
    args = SimpleNamespace(
        use_bias_correction_kl=cfg.get("use_bias_correction_kl", True), delta=None, steps_per_generation=1
    )
    metrics: dict[str, list[float]] = defaultdict(list)
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (lp, torch.zeros_like(lp), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=cfg.get("importance_sampling_level", "token"),
        beta=cfg.get("beta", 0.0),
        args=args,
        loss_type=cfg["loss_type"],
        epsilon_low=cfg.get("epsilon", EPS_LOW),
        epsilon_high=cfg.get("epsilon_high", EPS_HIGH),
        use_vllm=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_COMPLETION,
        accelerator=accelerator,
        _entropy_bonus_enabled=False,
        _metrics={"train": metrics},
    )
    B, T = lp.shape
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    return GRPOTrainer._compute_loss(trainer, None, inputs), metrics


def rlnb_grads(case: Case, lengths, lp, old, ref, adv) -> tuple[torch.Tensor, dict[str, float]]:
    """rlnb's gradient w.r.t. the completion log-probs, padded like TRL's, and its loss metrics."""
    leaves, inputs = [], []
    for i, n in enumerate(lengths):
        pad = torch.zeros(PROMPT, dtype=torch.float64)
        leaves.append(torch.cat([pad - 1.0, lp[i, :n]]).detach().requires_grad_(True))
        inputs.append(
            {
                "target_tokens": torch.zeros(PROMPT + n, dtype=torch.long),
                "logprobs": torch.cat([pad, old[i, :n]]).float(),
                "advantages": torch.cat([pad, adv[i].expand(n)]).float(),
                "reference_logprobs": torch.cat([pad, ref[i, :n]]).float(),
                "mask": torch.tensor([0] * PROMPT + [1] * n),
            }
        )
    params = validate(case.loss, case.params, inputs, [PROMPT + n for n in lengths])
    loss, metrics = compute(case.loss, params, leaves, inputs, horizon=MAX_COMPLETION)
    loss.backward()
    grad = torch.zeros_like(lp)
    for i, (leaf, n) in enumerate(zip(leaves, lengths, strict=True)):
        assert torch.all(leaf.grad[:PROMPT] == 0)  # prompt positions are masked out
        grad[i, :n] = leaf.grad[PROMPT:]
    return grad, metrics


def float32_inputs(old, ref, adv):
    """rlnb's wire inputs are float32: TRL's side gets the same rounded values."""
    return old.float().double(), ref.float().double(), adv.float().double()


def relative_gap(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("seed", [0, 3, 4])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradients_match_trls_formulas(case, seed):
    lengths, mask, old, lp, ref, adv = batch(seed)
    old, ref, adv = float32_inputs(old, ref, adv)
    grad, _ = rlnb_grads(case, lengths, lp, old, ref, adv)
    leaf = lp.detach().requires_grad_(True)
    trl_loss(case.trl, leaf, old, ref, adv, mask).backward()
    want = leaf.grad * (mask.sum() if case.scale == "tokens" else 1.0)
    assert relative_gap(grad, want) < 1e-6, case.name
    assert float(want.abs().max()) > 1e-3  # a gradient worth comparing


def test_the_kl_bias_correction_option_changes_the_gradient():
    """With beta > 0, TRL 1.16's default (the KL term times the ratio) and the plain k3 term give different
    gradients, on-policy too (the ratio's own gradient); ``use_bias_correction_kl=False`` is the plain one."""
    lengths, mask, old, lp, ref, adv = batch()
    old, ref, adv = float32_inputs(old, ref, adv)
    on = CASES[6]
    off = Case("off", {**on.trl, "use_bias_correction_kl": False}, GRPO, {**on.params, "use_bias_correction_kl": False})
    for sampler in (old, lp.float().double()):  # off-policy, then on-policy (q = lp)
        gap = relative_gap(
            rlnb_grads(on, lengths, lp, sampler, ref, adv)[0], rlnb_grads(off, lengths, lp, sampler, ref, adv)[0]
        )
        assert gap > 1e-4


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradients_and_clip_metrics_match_trls_own_code(case, trl):
    lengths, mask, old, lp, ref, adv = batch(seed=2)
    old, ref, adv = float32_inputs(old, ref, adv)
    grad, metrics = rlnb_grads(case, lengths, lp, old, ref, adv)
    leaf = lp.detach().requires_grad_(True)
    loss, trl_metrics = trl_own_loss(case.trl, leaf, old, ref, adv, mask)
    loss.backward()
    want = leaf.grad * (mask.sum() if case.scale == "tokens" else 1.0)
    assert relative_gap(grad, want) < 1e-6, case.name
    sequence = case.trl.get("importance_sampling_level") == "sequence"
    if case.loss == GRPO and not sequence:
        assert metrics["loss/clip/low_fraction"] == pytest.approx(trl_metrics["clip_ratio/low_mean"][0], abs=1e-6)
        assert metrics["loss/clip/high_fraction"] == pytest.approx(trl_metrics["clip_ratio/high_mean"][0], abs=1e-6)
        assert metrics["loss/clip/low_fraction"] > 0 and metrics["loss/clip/high_fraction"] > 0  # both clips hit
    elif case.loss == GRPO:  # GSPO: TRL counts clipped sequences, rlnb their tokens (docs/losses.md)
        n = mask.sum(-1)
        ratio = (((lp - old) * mask).sum(-1) / n).exp()
        low = (ratio < 1 - EPS_LOW) & (adv < 0)
        assert trl_metrics["clip_ratio/low_mean"][0] == pytest.approx(float(low.double().mean()), abs=1e-6)
        assert metrics["loss/clip/low_fraction"] == pytest.approx(float((low * n).sum() / n.sum()), abs=1e-6)
        assert low.any() and not low.all()  # the two definitions differ here
    if "beta" in case.trl:
        assert metrics["loss/kl_ref/mean"] == pytest.approx(trl_metrics["kl"][0], rel=1e-5)


def main() -> None:
    """Print each case's measured gap (docs/losses.md): ``python -m tests.engine.test_trl_parity``."""
    try:
        import trl
    except ImportError:
        trl = None
    for case in CASES:
        lengths, mask, old, lp, ref, adv = batch(seed=2)
        old, ref, adv = float32_inputs(old, ref, adv)
        grad, _ = rlnb_grads(case, lengths, lp, old, ref, adv)
        gaps = []
        for fn in (trl_loss, trl_own_loss) if trl is not None else (trl_loss,):
            leaf = lp.detach().requires_grad_(True)
            out = fn(case.trl, leaf, old, ref, adv, mask)
            (out[0] if isinstance(out, tuple) else out).backward()
            gaps.append(relative_gap(grad, leaf.grad * (mask.sum() if case.scale == "tokens" else 1.0)))
        own = f"  trl {trl.__version__} {gaps[1]:.1e}" if trl is not None else "  (trl not installed)"
        print(f"{case.name:32s} formulas {gaps[0]:.1e}{own}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
