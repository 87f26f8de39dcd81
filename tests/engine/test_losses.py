"""rlnb.engine.losses against pure-Python references (loops + math), and validate()'s input contract.

Gradients of the losses are compared with central finite differences of the reference, except where a
stop-gradient makes the gradient differ from the derivative of the value (CISPO), which is checked
against its closed form.
"""

import math

import pytest
import torch

from rlnb import wire
from rlnb.engine.losses import InvalidLossInput, compute, logprobs_and_entropy, loss_mask, validate

CE, GRPO, IS = "LOSS_TYPE_CROSS_ENTROPY", "LOSS_TYPE_GRPO", "LOSS_TYPE_IMPORTANCE_SAMPLING"
PPO, CISPO, DPPO, DRO = "LOSS_TYPE_PPO", "LOSS_TYPE_CISPO", "LOSS_TYPE_DPPO", "LOSS_TYPE_DRO"
FIXED_HORIZON = "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON"
TOKEN_MEAN = "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN"
SEQUENCE_MEAN = "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN"
RATIO_TOKEN, RATIO_SEQUENCE = "GRPO_LOSS_RATIO_TYPE_TOKEN", "GRPO_LOSS_RATIO_TYPE_SEQUENCE"

HORIZON = 16  # FIXED_HORIZON's constant divisor (a session passes its maximum sequence length)
TOL = 1e-6
H = 1e-6  # finite-difference step

# Three samples of lengths 4, 3, 2. Sampler logprobs Q, advantages A, weights W and reference logprobs
# REF are exact in float32. The current logprobs are LP = Q + D, in float64, with log-ratios D that put
# r = e^D below, inside and above every clip range, well away from the kinks. The last sample has
# weight 0 everywhere; W holds fractional weights that policy losses must treat as 1.
Q = [[-0.25, -0.5, -1.0, -2.0], [-1.5, -0.75, -3.0], [-0.125, -1.25]]
D = [[-0.5, 0.1, 0.6, -0.1], [0.4, -0.3, 1.5], [0.05, -0.05]]
A = [[-1.0, -1.0, 1.0, 0.5], [-2.0, 1.5, 0.5], [0.25, -1.0]]
W = [[1.0, 0.5, 1.0, 0.0], [1.0, 1.0, 0.25], [0.0, 0.0]]
REF = [[-0.5, -0.25, -1.5, -2.0], [-1.0, -1.0, -2.5], [-0.25, -1.0]]
M = [[float(w != 0) for w in row] for row in W]
LP = [[q + d for q, d in zip(qs, ds, strict=True)] for qs, ds in zip(Q, D, strict=True)]
SEQ_LENS = [len(q) for q in Q]


def make_inputs(weights=W, key="weights", dtype=torch.float32):
    out = []
    for i, q in enumerate(Q):
        x = {
            "target_tokens": torch.arange(len(q)),
            "logprobs": torch.tensor(q),
            "advantages": torch.tensor(A[i]),
            "reference_logprobs": torch.tensor(REF[i]),
        }
        if key is not None:
            x[key] = torch.tensor(weights[i], dtype=dtype)
        out.append(x)
    return out


def run(loss_type, params, inputs=None, dtype=torch.float64):
    """validate + compute + backward at LP; returns (loss, per-token grads flattened, metrics)."""
    inputs = make_inputs() if inputs is None else inputs
    params = validate(loss_type, params, inputs, SEQ_LENS)
    lps = [torch.tensor(row, dtype=dtype, requires_grad=True) for row in LP]
    loss, metrics = compute(loss_type, params, lps, inputs, horizon=HORIZON)
    loss.backward()
    return loss.item(), flat([t.grad.tolist() for t in lps]), metrics


def flat(rows):
    return [v for row in rows for v in row]


def numgrad(f):
    """Central finite differences at LP of f (a function of the nested per-token logprobs), flattened."""
    grads = []
    for i, row in enumerate(LP):
        for t in range(len(row)):
            up, down = [list(r) for r in LP], [list(r) for r in LP]
            up[i][t] += H
            down[i][t] -= H
            grads.append((f(up) - f(down)) / (2 * H))
    return grads


def clip(x, lo, hi):
    return min(max(x, lo), hi)


def tokens(lp, m=M):
    """(lp, q, A, m) for every token of the batch."""
    for i, row in enumerate(lp):
        for t, lpt in enumerate(row):
            yield lpt, Q[i][t], A[i][t], m[i][t]


def masked_mean(values, m=M):
    return sum(v * mt for v, mt in zip(values, flat(m), strict=True)) / sum(flat(m))


RATIOS = [math.exp(d) for d in flat(D)]


def assert_matches(loss, grads, ref):
    assert loss == pytest.approx(ref(LP), abs=TOL)
    assert grads == pytest.approx(numgrad(ref), abs=TOL)


def assert_common_metrics(metrics):
    assert metrics["loss/tokens"] == 6.0
    assert metrics["loss/ratio/mean"] == pytest.approx(masked_mean(RATIOS), abs=TOL)
    assert metrics["loss/sampler_kl/mean"] == pytest.approx(masked_mean([-d for d in flat(D)]), abs=TOL)


# ---------------------------------------------------------------- cross-entropy


def test_cross_entropy_is_weighted_sum_with_fractional_weights():
    loss, grads, metrics = run(CE, None)
    expected = -sum(lpt * w for lpt, w in zip(flat(LP), flat(W), strict=True))
    assert loss == pytest.approx(expected, abs=TOL)
    assert grads == pytest.approx([-w for w in flat(W)], abs=TOL)
    assert metrics == {"loss/tokens": 4.75}


def test_cross_entropy_accepts_int64_weights():
    ints = [[1, 2, 0, 1], [1, 1, 3], [0, 0]]
    loss, grads, _ = run(CE, {}, make_inputs(ints, dtype=torch.int64))
    assert loss == pytest.approx(-sum(lpt * w for lpt, w in zip(flat(LP), flat(ints), strict=True)), abs=TOL)
    assert grads == pytest.approx([-float(w) for w in flat(ints)], abs=TOL)


# ---------------------------------------------------------------- masks


def ref_is(lp, m=M):
    return -sum(math.exp(lpt - q) * a * mt for lpt, q, a, mt in tokens(lp, m))


def test_importance_sampling():
    loss, grads, metrics = run(IS, None)
    assert_matches(loss, grads, ref_is)
    assert_common_metrics(metrics)
    assert "loss/clip/low_fraction" not in metrics


def test_policy_losses_treat_fractional_weights_as_one():
    fractional = run(IS, None, make_inputs(W))
    binary = run(IS, None, make_inputs(M))
    assert fractional[0] == pytest.approx(binary[0], abs=TOL)
    assert fractional[1] == pytest.approx(binary[1], abs=TOL)
    assert fractional[0] == pytest.approx(ref_is(LP), abs=TOL)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_mask_is_equivalent_to_weights(dtype):
    loss, grads, _ = run(IS, None, make_inputs(M, key="mask", dtype=dtype))
    assert_matches(loss, grads, ref_is)


def test_no_weights_or_mask_means_every_token_counts():
    ones = [[1.0] * n for n in SEQ_LENS]
    loss, grads, metrics = run(IS, None, make_inputs(key=None))
    assert_matches(loss, grads, lambda lp: ref_is(lp, ones))
    assert metrics["loss/tokens"] == 9.0


def test_loss_mask():
    x = make_inputs()[0]
    assert loss_mask(PPO, x).tolist() == [1.0, 1.0, 1.0, 0.0]
    assert loss_mask(CE, x).tolist() == [1.0, 1.0, 1.0, 0.0]
    mask = make_inputs([[0, 3, 1, 0]] * 3, key="mask", dtype=torch.int64)[0]
    assert loss_mask(PPO, mask).tolist() == [0.0, 1.0, 1.0, 0.0]
    no_mask = loss_mask(GRPO, make_inputs(key=None)[1])
    assert no_mask.dtype == torch.float32 and no_mask.tolist() == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------- clipped losses


@pytest.mark.parametrize(
    ("params", "lo", "hi", "low_fraction", "high_fraction"),
    [
        # (0,0): r 0.61 < 0.8 with A < 0 is low-clipped; (0,2) r 1.82 and (1,2) r 4.48 with A > 0 high-clipped;
        # (1,0) r 1.49 with A < 0 and (1,1) r 0.74 with A > 0 are past a bound on the side min() keeps: not counted.
        (None, 0.8, 1.2, 1 / 6, 2 / 6),
        ({"clip_low_threshold": 0.5, "clip_high_threshold": 1.6}, 0.5, 1.6, 0.0, 2 / 6),
    ],
)
def test_ppo(params, lo, hi, low_fraction, high_fraction):
    def ref(lp):
        total = 0.0
        for lpt, q, a, mt in tokens(lp):
            r = math.exp(lpt - q)
            total -= min(r * a, clip(r, lo, hi) * a) * mt
        return total

    loss, grads, metrics = run(PPO, params)
    assert_matches(loss, grads, ref)
    assert_common_metrics(metrics)
    assert metrics["loss/clip/low_fraction"] == pytest.approx(low_fraction, abs=TOL)
    assert metrics["loss/clip/high_fraction"] == pytest.approx(high_fraction, abs=TOL)


def test_ppo_clipped_tokens_get_no_gradient():
    _, grads, _ = run(PPO, None)
    # (0,0): A < 0, r < 0.8 and (0,2): A > 0, r > 1.2 are clipped; (1,0) and (1,1) are past the clip
    # range on the side that min() keeps, so they still learn.
    assert grads[0] == 0.0 and grads[2] == 0.0
    assert grads[4] != 0.0 and grads[5] != 0.0


def test_cispo_coefficient_is_detached():
    lo, hi = 0.0, 4.0
    coef = [clip(r, lo, hi) for r in RATIOS]
    loss, grads, metrics = run(CISPO, None)
    value = -sum(c * a * lpt * mt for c, (lpt, _, a, mt) in zip(coef, tokens(LP), strict=True))
    assert loss == pytest.approx(value, abs=TOL)
    assert grads == pytest.approx([-c * a * mt for c, (_, _, a, mt) in zip(coef, tokens(LP), strict=True)], abs=TOL)

    def undetached(lp):  # what the gradient would be without the stop-gradient
        return -sum(clip(math.exp(lpt - q), lo, hi) * a * lpt * mt for lpt, q, a, mt in tokens(lp))

    assert grads != pytest.approx(numgrad(undetached), abs=1e-3)
    assert_common_metrics(metrics)
    assert metrics["loss/clip/low_fraction"] == 0.0
    assert metrics["loss/clip/high_fraction"] == pytest.approx(1 / 6, abs=TOL)  # r = e^1.5 > 4


def test_dppo_trust_region():
    def outside(lpt, q, a, delta_low=0.15, delta_high=0.15):
        p, p_old = math.exp(lpt), math.exp(q)
        return (a > 0 and p - p_old > delta_high) or (a < 0 and p_old - p > delta_low)

    def ref(lp):
        return -sum(math.exp(lpt - q) * a * mt for lpt, q, a, mt in tokens(lp) if not outside(lpt, q, a))

    loss, grads, metrics = run(DPPO, None)
    assert_matches(loss, grads, ref)
    # (0,0): A < 0 and p fell by 0.31; (0,2) and (1,2): A > 0 and p rose by 0.30 and 0.17.
    assert [i for i, tok in enumerate(tokens(LP)) if outside(*tok[:3])] == [0, 2, 6]
    assert [grads[i] for i in (0, 2, 6)] == [0.0, 0.0, 0.0]
    assert all(grads[i] != 0.0 for i in (1, 4, 5))
    assert metrics["loss/trust_region/masked_fraction"] == pytest.approx(3 / 6, abs=TOL)
    assert_common_metrics(metrics)


def test_dppo_deltas_are_honoured():
    loss, _, metrics = run(DPPO, {"delta_low": 1.0, "delta_high": 1.0})
    assert loss == pytest.approx(ref_is(LP), abs=TOL)  # nothing leaves a trust region of width 1
    assert metrics["loss/trust_region/masked_fraction"] == 0.0


@pytest.mark.parametrize("beta", [0.0, 0.5, 2])
def test_dro(beta):
    def ref(lp):
        return -sum((lpt * a - 0.5 * beta * (lpt - q) ** 2) * mt for lpt, q, a, mt in tokens(lp))

    loss, grads, metrics = run(DRO, {"beta": beta})
    assert_matches(loss, grads, ref)
    assert_common_metrics(metrics)


# ---------------------------------------------------------------- GRPO


def ref_grpo(lp, agg, ratio, beta, m=M, lo=0.8, hi=1.28, correction=True):
    sums, counts = [], []
    for i, row in enumerate(lp):
        count = sum(m[i])
        if ratio == RATIO_SEQUENCE:
            mean_log_r = sum((lpt - q) * mt for lpt, q, mt in zip(row, Q[i], m[i], strict=True)) / (count or 1)
            ratios = [math.exp(mean_log_r)] * len(row)
        else:
            ratios = [math.exp(lpt - q) for lpt, q in zip(row, Q[i], strict=True)]
        total = 0.0
        for t, (lpt, r) in enumerate(zip(row, ratios, strict=True)):
            a = A[i][t]
            objective = min(r * a, clip(r, lo, hi) * a)
            if beta > 0:
                d = REF[i][t] - lpt
                objective -= beta * (math.exp(d) - d - 1) * (r if correction else 1.0)
            total -= objective * m[i][t]
        sums.append(total)
        counts.append(count)
    if agg == TOKEN_MEAN:
        return sum(sums) / (sum(counts) or 1)
    if agg == SEQUENCE_MEAN:
        return sum(s / (c or 1) for s, c in zip(sums, counts, strict=True)) / len(lp)
    return sum(sums) / (len(lp) * HORIZON)


def ratios(ratio):
    """Every token's importance ratio: its own, or its sample's (the exp of the masked mean log-ratio)."""
    if ratio == RATIO_TOKEN:
        return RATIOS
    out = []
    for ds, ms in zip(D, M, strict=True):
        mean = sum(d * m for d, m in zip(ds, ms, strict=True)) / (sum(ms) or 1)
        out += [math.exp(mean)] * len(ds)
    return out


AGGS = [FIXED_HORIZON, TOKEN_MEAN, SEQUENCE_MEAN]
RATIO_TYPES = [RATIO_TOKEN, RATIO_SEQUENCE]


@pytest.mark.parametrize("correction", [True, False])
@pytest.mark.parametrize("beta", [0.0, 0.125])
@pytest.mark.parametrize("ratio", RATIO_TYPES)
@pytest.mark.parametrize("agg", AGGS)
def test_grpo(agg, ratio, beta, correction):
    params = {"agg_type": agg, "ratio_type": ratio, "beta": beta, "use_bias_correction_kl": correction}
    loss, grads, metrics = run(GRPO, params)
    assert_matches(loss, grads, lambda lp: ref_grpo(lp, agg, ratio, beta, correction=correction))
    assert metrics["loss/tokens"] == 6.0
    if beta > 0:
        kl = [math.exp(r - lpt) - (r - lpt) - 1 for r, lpt in zip(flat(REF), flat(LP), strict=True)]
        if correction:  # the logged KL is the term in the loss, as TRL logs it
            kl = [k * r for k, r in zip(kl, ratios(ratio), strict=True)]
        assert metrics["loss/kl_ref/mean"] == pytest.approx(masked_mean(kl), abs=TOL)
    else:
        assert "loss/kl_ref/mean" not in metrics


def test_grpo_kl_bias_correction_is_the_default_and_changes_only_the_gradient_on_policy():
    """At r = 1 (on-policy) the corrected KL term has the same value, but its gradient gains kl·∇lp: the
    reverse-KL gradient ∇lp·(lp - ref), where the plain k3 term gives ∇lp·(1 - e^(ref - lp))."""
    inputs = make_inputs()
    for x, row in zip(inputs, LP, strict=True):
        x["logprobs"] = torch.tensor(row, dtype=torch.float32)  # q = lp: on-policy
        x["advantages"] = torch.zeros(len(row))  # only the KL term is left
    beta = 0.5
    out = {}
    for correction in (None, True, False):
        params = validate(
            GRPO, {"beta": beta, "agg_type": TOKEN_MEAN, "use_bias_correction_kl": correction}, inputs, SEQ_LENS
        )
        lps = [torch.tensor(row, dtype=torch.float32, requires_grad=True) for row in LP]
        loss, _ = compute(GRPO, params, lps, inputs, horizon=HORIZON)
        loss.backward()
        out[correction] = (loss.item(), flat([t.grad.tolist() for t in lps]))
    assert out[None] == out[True]  # the default
    assert out[True][0] == pytest.approx(out[False][0], abs=1e-6)  # same value on-policy
    d = [ref - lp for ref, lp in zip(flat(REF), flat(LP), strict=True)]
    n = sum(flat(M))
    assert out[True][1] == pytest.approx([beta * -dt * mt / n for dt, mt in zip(d, flat(M), strict=True)], abs=1e-6)
    assert out[False][1] == pytest.approx(
        [beta * (1 - math.exp(dt)) * mt / n for dt, mt in zip(d, flat(M), strict=True)], abs=1e-6
    )


def test_grpo_defaults_are_fixed_horizon_token_ratio():
    loss, grads, metrics = run(GRPO, None, make_inputs())
    assert_matches(loss, grads, lambda lp: ref_grpo(lp, FIXED_HORIZON, RATIO_TOKEN, 0.0))
    assert_common_metrics(metrics)
    assert metrics["loss/clip/low_fraction"] == pytest.approx(1 / 6, abs=TOL)
    assert metrics["loss/clip/high_fraction"] == pytest.approx(2 / 6, abs=TOL)


def test_grpo_clip_thresholds_are_honoured():
    params = {"clip_low_threshold": 0.5, "clip_high_threshold": 1.6, "agg_type": TOKEN_MEAN}
    loss, grads, metrics = run(GRPO, params)
    assert_matches(loss, grads, lambda lp: ref_grpo(lp, TOKEN_MEAN, RATIO_TOKEN, 0.0, lo=0.5, hi=1.6))
    assert metrics["loss/clip/low_fraction"] == 0.0
    assert metrics["loss/clip/high_fraction"] == pytest.approx(2 / 6, abs=TOL)


@pytest.mark.parametrize("loss_type", [PPO, GRPO])
@pytest.mark.parametrize(("side", "sign", "bounds"), [("low", -1.0, (1.0, 1.2)), ("high", 1.0, (0.8, 1.0))])
def test_a_ratio_exactly_at_a_threshold_is_not_counted_clipped(loss_type, side, sign, bounds):
    """The clip fractions count the tokens whose gradient the clip stops, as TRL's ``clip_ratio`` (r < low, r > high):
    at r = the threshold exactly the gradient flows, and the token is not counted; just past it, it stops and is."""
    x = [{"target_tokens": torch.arange(2), "logprobs": torch.tensor([-0.5, -1.0]), "advantages": sign * torch.ones(2)}]
    params = validate(loss_type, {"clip_low_threshold": bounds[0], "clip_high_threshold": bounds[1]}, x, [2])
    lp = torch.tensor([-0.5, -1.0 + 0.1 * sign], dtype=torch.float64, requires_grad=True)  # r = 1 exactly, then past
    loss, metrics = compute(loss_type, params, [lp], x, horizon=HORIZON)
    loss.backward()
    assert metrics[f"loss/clip/{side}_fraction"] == 0.5 and lp.grad[0] != 0 and lp.grad[1] == 0


@pytest.mark.parametrize("loss_type", [PPO, GRPO, CISPO])
@pytest.mark.parametrize("low, high", [(-1e300, 1e300), (0.0, 3.5e38), (-3.5e38, 1.0)])
def test_clip_thresholds_past_float32s_range_clip_nothing_beyond_it(loss_type, low, high):
    """1e300 as "no clipping" on float32 log-probs: the threshold is held at float32's largest value, which no
    ratio passes (torch could not convert the scalar: INTERNAL_ERROR), so the loss is that of a finite bound."""
    finite = {"clip_low_threshold": max(low, -1e30), "clip_high_threshold": min(high, 1e30)}
    huge = {"clip_low_threshold": low, "clip_high_threshold": high}
    loss, grads, metrics = run(loss_type, huge, dtype=torch.float32)
    assert (loss, grads, metrics) == run(loss_type, finite, dtype=torch.float32)
    if high > 1e30:
        assert metrics["loss/clip/high_fraction"] == 0.0
    if loss_type == PPO and (low, high) == (-1e300, 1e300):  # PPO that clips nothing is importance sampling
        assert loss == pytest.approx(run(IS, None, dtype=torch.float32)[0], abs=1e-5)


def run_at(loss_type, params, lp_rows):
    """``run`` at the given per-token log-probs (float32, as the engine's): (loss, grads, metrics)."""
    inputs = make_inputs()
    params = validate(loss_type, params, inputs, SEQ_LENS)
    lps = [torch.tensor(row, dtype=torch.float32, requires_grad=True) for row in lp_rows]
    loss, metrics = compute(loss_type, params, lps, inputs, horizon=HORIZON)
    loss.backward()
    return loss.item(), flat([t.grad.tolist() for t in lps]), metrics


@pytest.mark.parametrize(
    "loss_type, params",
    [(CE, None), (IS, None), (PPO, None), (CISPO, None), (DPPO, None), (DRO, {"beta": 0.5}),
     (GRPO, {"beta": 0.125}), (GRPO, {"ratio_type": RATIO_SEQUENCE, "agg_type": SEQUENCE_MEAN})],
)  # fmt: skip
def test_a_token_of_weight_0_whose_log_prob_is_minus_infinity_is_not_read(loss_type, params):
    """A prompt token the model gives probability 0 (log-prob -inf: a banned token) has weight 0, so it must not
    count. 0 x -inf made the loss NaN, and the step failed NON_FINITE_LOSS: every loss now gives what it gives at
    a finite log-prob there, with no gradient to it."""
    banned = [
        [-math.inf if m == 0 else lp for lp, m in zip(lps, ms, strict=True)] for lps, ms in zip(LP, M, strict=True)
    ]
    loss, grads, metrics = run_at(loss_type, params, banned)
    assert math.isfinite(loss)
    assert (loss, grads, metrics) == run_at(loss_type, params, LP)
    assert all(g == 0.0 for g, m in zip(grads, flat(M), strict=True) if m == 0)


def test_grpo_sequence_ratio_metrics():
    _, _, metrics = run(GRPO, {"ratio_type": RATIO_SEQUENCE})
    # masked mean log-ratios: sample 0 (-0.5 + 0.1 + 0.6) / 3 inside [0.8, 1.28]; sample 1 1.6 / 3 above,
    # where the clip is active only on its two tokens with A > 0.
    r0, r1 = math.exp(0.2 / 3), math.exp(1.6 / 3)
    assert metrics["loss/ratio/mean"] == pytest.approx((3 * r0 + 3 * r1) / 6, abs=TOL)
    assert metrics["loss/clip/low_fraction"] == 0.0
    assert metrics["loss/clip/high_fraction"] == pytest.approx(2 / 6, abs=TOL)


def test_float32_policy_logprobs():
    params = {"ratio_type": RATIO_SEQUENCE, "agg_type": SEQUENCE_MEAN, "beta": 0.125}
    loss, grads, _ = run(GRPO, params, dtype=torch.float32)
    assert loss == pytest.approx(ref_grpo(LP, SEQUENCE_MEAN, RATIO_SEQUENCE, 0.125), abs=1e-5)
    assert grads == pytest.approx(numgrad(lambda lp: ref_grpo(lp, SEQUENCE_MEAN, RATIO_SEQUENCE, 0.125)), abs=1e-5)


def test_fixed_horizon_gradient_does_not_depend_on_the_prompt_length():
    """The same 4-token completion behind a 2-token and behind a 19-token prompt (prompt positions masked)
    gets the same gradient: the divisor is num_samples x horizon, not the longest sequence."""
    completion_q, completion_a = [-1.0, -2.0, -0.5, -1.5], [1.0, -0.5, 2.0, 0.25]

    def grads_behind(prompt_len):
        n = prompt_len - 1 + len(completion_q)
        x = {
            "target_tokens": torch.arange(n),
            "logprobs": torch.tensor([0.0] * (prompt_len - 1) + completion_q),
            "advantages": torch.tensor([0.0] * (prompt_len - 1) + completion_a),
            "weights": torch.tensor([0.0] * (prompt_len - 1) + [1.0] * len(completion_q)),
        }
        params = validate(GRPO, None, [x], [n])
        lp = torch.tensor([-3.0] * (prompt_len - 1) + [q + 0.1 for q in completion_q], requires_grad=True)
        loss, _ = compute(GRPO, params, [lp], [x], horizon=64)
        loss.backward()
        return lp.grad[prompt_len - 1 :].tolist()

    short, long = grads_behind(2), grads_behind(19)
    assert short == pytest.approx(long, abs=1e-9) and any(g != 0 for g in short)


@pytest.mark.parametrize("ratio", RATIO_TYPES)
@pytest.mark.parametrize("agg", AGGS)
def test_grpo_fully_masked_batch_is_zero_not_nan(agg, ratio):
    zeros = [[0.0] * n for n in SEQ_LENS]
    params = {"agg_type": agg, "ratio_type": ratio, "beta": 0.5}
    loss, grads, metrics = run(GRPO, params, make_inputs(zeros))
    assert loss == 0.0 and grads == [0.0] * 9
    assert metrics["loss/tokens"] == 0.0 and metrics["loss/ratio/mean"] == 0.0


# ---------------------------------------------------------------- validate


def test_validate_fills_defaults():
    inputs = make_inputs()
    assert validate(GRPO, None, inputs, SEQ_LENS) == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.28,
        "beta": 0.0,
        "agg_type": FIXED_HORIZON,
        "ratio_type": RATIO_TOKEN,
        "use_bias_correction_kl": True,
    }
    assert validate(GRPO, {"use_bias_correction_kl": False}, inputs, SEQ_LENS)["use_bias_correction_kl"] is False
    assert validate(PPO, {"clip_low_threshold": 0.5, "clip_high_threshold": None}, inputs, SEQ_LENS) == {
        "clip_low_threshold": 0.5,
        "clip_high_threshold": 1.2,
    }
    assert validate(CISPO, {}, inputs, SEQ_LENS) == {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
    assert validate(DPPO, None, inputs, SEQ_LENS) == {"delta_low": 0.15, "delta_high": 0.15}
    dro = validate(DRO, {"beta": 1}, inputs, SEQ_LENS)
    assert dro == {"beta": 1.0} and isinstance(dro["beta"], float)
    assert validate(CE, None, inputs, SEQ_LENS) == {}
    assert sorted(wire.LOSSES) == sorted([CE, GRPO, IS, PPO, CISPO, DPPO, DRO])


def test_validate_ignores_unknown_input_keys():
    inputs = make_inputs()
    inputs[0]["extra"] = "anything"
    inputs[1]["mask"] = torch.ones(3)  # not an input of cross-entropy, so not "weights and mask"
    assert validate(CE, None, inputs, SEQ_LENS) == {}
    assert loss_mask(CE, inputs[1]).tolist() == [1.0, 1.0, 1.0]  # from weights


def test_grpo_needs_reference_logprobs_only_when_beta_is_positive():
    inputs = make_inputs()
    for x in inputs:
        del x["reference_logprobs"]
    assert validate(GRPO, {"beta": 0.0}, inputs, SEQ_LENS)["beta"] == 0.0
    with pytest.raises(InvalidLossInput, match="sample 0: missing input 'reference_logprobs'"):
        validate(GRPO, {"beta": 0.01}, inputs, SEQ_LENS)


def _drop(i, key):
    return lambda xs: xs[i].pop(key)


def _set(i, key, fn):
    return lambda xs: xs[i].__setitem__(key, fn(xs[i][key]))


def _nan_at(t):
    t = t.clone()
    t[1] = math.nan
    return t


BAD = [
    ("LOSS_TYPE_SFT", None, None, ["'LOSS_TYPE_SFT'", "unknown loss type"]),
    (PPO, {"beta": 0.1}, None, ["unknown param 'beta'", PPO]),
    (CE, {"beta": 0.1}, None, ["unknown param 'beta'"]),
    (PPO, {"clip_low_threshold": 1.5}, None, ["loss.ppo_params.clip_low_threshold = 1.5 is invalid", "<= 1"]),
    (GRPO, {"clip_high_threshold": 0.9}, None, ["grpo_params.clip_high_threshold = 0.9", ">= 1"]),
    (GRPO, {"beta": -0.1}, None, ["grpo_params.beta = -0.1", ">= 0 and <= 3.4028234663852886e+38"]),
    (CISPO, {"clip_high_threshold": math.inf}, None, ["cispo_params.clip_high_threshold = inf", "finite"]),
    (PPO, {"clip_low_threshold": math.nan}, None, ["ppo_params.clip_low_threshold = nan", "finite"]),
    (PPO, {"clip_low_threshold": "0.8"}, None, ["ppo_params.clip_low_threshold = '0.8'", "a finite number"]),
    (DRO, {"beta": True}, None, ["dro_params.beta = True", "a finite number"]),
    (DPPO, {"delta_low": 1.5}, None, ["dppo_params.delta_low = 1.5", ">= 0 and <= 1"]),
    (DPPO, {"delta_high": -0.1}, None, ["dppo_params.delta_high = -0.1", ">= 0 and <= 1"]),
    (DRO, None, None, ["'beta'", "required"]),
    (GRPO, {"agg_type": "MEAN"}, None, ["grpo_params.agg_type = 'MEAN'", TOKEN_MEAN]),
    (GRPO, {"ratio_type": "TOKEN"}, None, ["grpo_params.ratio_type = 'TOKEN'", RATIO_SEQUENCE]),
    (GRPO, {"use_bias_correction_kl": 1}, None, ["grpo_params.use_bias_correction_kl = 1", "True or False"]),
    (GRPO, {"use_bias_correction_kl": "yes"}, None, ["grpo_params.use_bias_correction_kl = 'yes'", "True or False"]),
    (PPO, None, lambda xs: xs.clear(), ["empty batch"]),
    (PPO, None, lambda xs: xs.pop(), ["2 samples", "3 model inputs"]),
    (IS, None, _drop(1, "advantages"), ["sample 1", "'advantages'", "missing"]),
    (DRO, {"beta": 0.1}, _drop(2, "logprobs"), ["sample 2", "'logprobs'", "missing"]),
    (GRPO, None, _drop(0, "target_tokens"), ["sample 0", "'target_tokens'", "missing"]),
    (CE, None, _drop(1, "weights"), ["sample 1", "'weights'", "missing"]),
    (PPO, None, lambda xs: xs[2].update(mask=torch.ones(2)), ["sample 2", "'weights'", "'mask'"]),
    (GRPO, {"beta": 0.1}, _drop(1, "reference_logprobs"), ["sample 1", "'reference_logprobs'", "beta"]),
    (PPO, None, _set(0, "target_tokens", lambda t: t.int()), ["sample 0", "'target_tokens'", "int64"]),
    (PPO, None, _set(1, "logprobs", lambda t: t.double()), ["sample 1", "'logprobs'", "float32"]),
    (PPO, None, _set(2, "advantages", lambda t: t.half()), ["sample 2", "'advantages'", "float16"]),
    (PPO, None, _set(0, "weights", lambda t: t.bool()), ["sample 0", "'weights'", "torch.bool"]),
    (GRPO, None, _set(1, "reference_logprobs", lambda t: t.double()), ["sample 1", "'reference_logprobs'"]),
    (PPO, None, _set(1, "advantages", lambda t: t.tolist()), ["sample 1", "'advantages'", "tensor"]),
    (PPO, None, _set(1, "advantages", lambda t: t[None]), ["sample 1", "'advantages'", "1-D", "(1, 3)"]),
    (CISPO, None, _set(2, "logprobs", lambda t: t[:1]), ["sample 2", "'logprobs'", "length 2"]),
    (CE, None, _set(0, "target_tokens", lambda t: t[:3]), ["sample 0", "'target_tokens'"]),
    (PPO, None, _set(0, "logprobs", _nan_at), ["sample 0", "'logprobs'", "non-finite"]),
    (DPPO, None, _set(1, "advantages", lambda t: t / 0), ["sample 1", "'advantages'", "non-finite"]),
    (CE, None, _set(2, "weights", _nan_at), ["sample 2", "'weights'", "non-finite"]),
]


@pytest.mark.parametrize(("loss_type", "params", "mutate", "needles"), BAD)
def test_validate_rejects(loss_type, params, mutate, needles):
    inputs = make_inputs()
    if mutate is not None:
        mutate(inputs)
    with pytest.raises(InvalidLossInput) as err:
        validate(loss_type, params, inputs, SEQ_LENS)
    for needle in needles:
        assert needle in str(err.value)


@pytest.mark.parametrize(
    ("loss_type", "params"),
    [
        (GRPO, {"beta": -0.1}),
        (PPO, {"clip_low_threshold": 1.5}),
        (DRO, {"beta": 1e39}),
        (DPPO, {"delta_high": -0.1}),
        (GRPO, {"use_bias_correction_kl": "yes"}),
        (GRPO, {"agg_type": "MEAN"}),
        (GRPO, {"beta": -1.0, "clip_high_threshold": 0.5}),  # every bad field, not the first alone
    ],
)
def test_the_engine_refuses_a_bad_param_in_the_clients_words(loss_type, params):
    """A body that reaches the engine with a param out of its bounds (a crafted body, a batched run) is refused in the
    words rlnb's client uses for the same ``LossConfig`` (``wire.one_line``, one rule per field read from the wire
    model): the engine walked the bounds itself and said them another way ("in [0, 3.40282e+38]")."""
    field = wire.LOSS_PARAMS_FIELD[loss_type]
    with pytest.raises(ValueError) as client:
        wire.loss_config({"type": loss_type, field: params})
    with pytest.raises(InvalidLossInput) as engine:
        validate(loss_type, params, make_inputs(), SEQ_LENS)
    assert str(engine.value) == str(client.value)
    assert all(f"loss.{field}.{key} = " in str(engine.value) for key in params)


def test_validate_accepts_values_near_float32s_limits():
    """The finite check sums in float64, where no float32 values overflow: only NaN and infinities are refused."""
    inputs = make_inputs()
    for x in inputs:
        x["advantages"] = torch.full_like(x["advantages"], torch.finfo(torch.float32).max)
    inputs[0]["advantages"][0] = -torch.finfo(torch.float32).max
    validate(PPO, None, inputs, SEQ_LENS)  # no InvalidLossInput
    inputs[1]["advantages"][-1] = math.inf
    with pytest.raises(InvalidLossInput, match="sample 1: input 'advantages' has non-finite values"):
        validate(PPO, None, inputs, SEQ_LENS)


@pytest.mark.parametrize(("loss_type", "params"), [
    (IS, None), (PPO, None), (CISPO, None), (DPPO, None), (DRO, {"beta": 0.1}),
    (GRPO, {"beta": 0.1}), (GRPO, {"ratio_type": RATIO_SEQUENCE, "agg_type": SEQUENCE_MEAN}),
])  # fmt: skip
def test_values_at_masked_positions_change_nothing(loss_type, params):
    """What a caller leaves at masked positions (a prompt's -1e30 log-prob: e^(lp - q) overflows) is never read:
    the loss, the gradients and every metric are those of neutral values there, and finite."""
    want = run(loss_type, params)
    junk = make_inputs()
    for x, w in zip(junk, W, strict=True):
        off = torch.tensor(w) == 0
        for key, value in (("logprobs", -1e30), ("advantages", 1e30), ("reference_logprobs", -1e30)):
            x[key] = torch.where(off, torch.tensor(value), x[key])
    loss, grads, metrics = run(loss_type, params, junk)
    assert math.isfinite(loss) and all(map(math.isfinite, grads)) and all(map(math.isfinite, metrics.values()))
    assert loss == pytest.approx(want[0], abs=TOL)
    assert grads == pytest.approx(want[1], abs=TOL)
    assert metrics == pytest.approx(want[2], abs=TOL)


def test_the_metrics_of_a_batch_of_one_counted_token_are_that_tokens():
    """A mean over one token is that token's value (a denominator floored at 2, not 1, halved every mean)."""
    one = [[0.0, 0.0, 1.0, 0.0], [0.0] * 3, [0.0] * 2]  # token (0, 2): r = e^0.6 = 1.82, A = 1, high-clipped
    entropy = [torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([5.0, 6.0, 7.0]), torch.tensor([8.0, 9.0])]
    inputs = make_inputs(one)
    params = validate(PPO, None, inputs, SEQ_LENS)
    _, metrics = compute(PPO, params, [torch.tensor(row) for row in LP], inputs, horizon=HORIZON, entropy=entropy)
    assert metrics == pytest.approx({"loss/tokens": 1.0, "loss/ratio/mean": math.exp(0.6), "loss/sampler_kl/mean": -0.6,
                                     "loss/clip/low_fraction": 0.0, "loss/clip/high_fraction": 1.0,
                                     "loss/entropy/mean": 3.0}, abs=TOL)  # fmt: skip


# ---------------------------------------------------------------- entropy


def test_entropy_is_the_policys_mean_token_entropy_over_the_masked_tokens():
    """``logprobs_and_entropy`` gives the target log-probs and H = -Σ p log p per position, in chunks
    (here several), and ``compute`` reports its masked mean as ``loss/entropy/mean`` for every loss."""
    torch.manual_seed(0)
    logits = torch.randn(3, 200, 11, dtype=torch.float64) * 3  # 600 positions: 3 chunks of ENTROPY_ROWS
    logits[0, 0, 4] = -math.inf  # a token the model can never emit: p log p = 0, not NaN
    targets = torch.randint(0, 11, (3, 200))
    targets[0, 0] = 3
    lp, entropy = logprobs_and_entropy(logits, targets)
    p = torch.softmax(logits, -1)
    want = -(p * torch.log(p.clamp(min=1e-300))).sum(-1)
    torch.testing.assert_close(entropy, want.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lp, torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0].float())
    assert not entropy.requires_grad
    per_sample = [torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([5.0, 6.0, 7.0]), torch.tensor([8.0, 9.0])]
    want_mean = masked_mean(flat([t.tolist() for t in per_sample]))  # the 0/1 mask of the policy losses
    for loss_type, params in ((GRPO, None), (PPO, None), (CISPO, None), (IS, None)):
        inputs = make_inputs()
        params = validate(loss_type, params, inputs, SEQ_LENS)
        lps = [torch.tensor(row, requires_grad=True) for row in LP]
        _, metrics = compute(loss_type, params, lps, inputs, horizon=HORIZON, entropy=per_sample)
        assert metrics["loss/entropy/mean"] == pytest.approx(want_mean), loss_type
    _, metrics = compute(CE, {}, [torch.tensor(row) for row in LP], make_inputs(), horizon=HORIZON, entropy=per_sample)
    assert metrics["loss/entropy/mean"] == pytest.approx(want_mean)  # weights != 0, fractional or not
    _, metrics = compute(CE, {}, [torch.tensor(row) for row in LP], make_inputs(), horizon=HORIZON)
    assert "loss/entropy/mean" not in metrics  # no logits, no entropy
