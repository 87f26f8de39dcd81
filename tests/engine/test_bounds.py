"""The engine's optimizer and loss settings at and past their bounds, and optimizer state across checkpoints:
each refused with the field named, or carried over whole."""

import math
import re

import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb.engine.checkpoints import CheckpointMismatch


def local_session(**kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("record", False)
    return rlnb.connect("local", **kw)


@pytest.mark.parametrize("loss", ["dro", "grpo"])
def test_a_penalty_past_float32_is_refused_naming_it_not_a_nan_loss(loss):
    """``beta=1e39`` (the wire took any finite double) is inf in the loss's float32, and inf·0 NaN at every masked
    position: the forward-backward failed ``NON_FINITE_LOSS`` "loss is nan", whatever the samples, naming nothing."""
    with pytest.raises(ValueError, match=r"^loss_params\.beta = 1e\+39 is invalid: .* and <= 3\.4028234663852886e\+38"):
        wire.loss_config(loss, {"beta": 1e39})
    sample = samples.policy([1, 2], [3, 4], [-1.0, -1.0], 1.0, reference_logprobs=[-1.0, -1.0])
    field = wire.LOSS_PARAMS_FIELD[wire.LOSS_NAMES[loss]]
    params = wire.LOSSES[wire.LOSS_NAMES[loss]].params.model_construct(beta=1e39)  # as a crafted body would carry
    config = wire.LossConfig.model_construct(type=wire.LOSS_NAMES[loss], **{field: params})
    with local_session(model="tiny") as s:
        says = (
            rf"loss\.{field}\.beta = 1e\+39 is invalid: must be a finite number, >= 0 and <= 3\.4028234663852886e"
            r"\+38"
        )
        with pytest.raises(rlnb.OperationFailed, match=says):
            s.forward_backward([sample], config).result(timeout=30)
        assert all(p.grad is None for p in s.backend.trainer.parameters())
        assert math.isfinite(s.forward_backward([sample], loss, {"beta": 1e30}).result(timeout=30).loss)


def _train(s, steps, params):
    for i in range(steps):
        s.forward_backward([samples.cross_entropy(s.encode(f"n={i} m={i + 1}"))])
        s.optim_step(params)
    s.wait()
    return {k: v.detach().clone() for k, v in s.backend.trainer.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_an_adam_eps_that_is_zero_in_the_weights_dtype_fails_invalid_input_not_nan_weights(dtype):
    """eps 1e-50 is 0 in float32: AdamW divided 0 by 0 for every weight whose gradient was 0 (the embedding rows of
    unused tokens), the optim-step COMPLETED and those weights were NaN. A float16 weight is stepped as its float32
    master, so float32's bound is the one that holds there too."""
    with local_session(model="tiny", dtype=dtype, threads=1) as s:
        before = {k: v.clone() for k, v in s.backend.trainer.state_dict().items()}
        s.forward_backward([samples.cross_entropy(s.encode("n=1"))])
        with pytest.raises(rlnb.OperationFailed, match=r"adam_params.eps 1e-50 is 0 in float32.*>= 1.4e-45") as info:
            s.optim_step(rlnb.AdamParams(eps=1e-50)).result(timeout=30)
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
        assert _same(before, s.backend.trainer.state_dict()) and s.step == 0
        after = _train(s, 2, rlnb.AdamParams(eps=1e-6))  # an eps the dtype holds: the weights stay finite
        assert all(v.isfinite().all() for v in after.values())


def test_float16_weights_train_with_the_default_eps():
    """The default eps 1e-8 is 0 in float16, and was refused there; AdamW's moments are float32 (its masters'), where
    it holds: the weights train and stay finite, the unused embedding rows (gradient 0) as they were."""
    with local_session(model="tiny", dtype="float16", threads=1) as s:
        before = {k: v.clone() for k, v in s.backend.trainer.state_dict().items()}
        after = _train(s, 2, rlnb.AdamParams(weight_decay=0.0))
        assert s.step == 2 and all(v.isfinite().all() for v in after.values())
        assert not _same(before, after)
        unused = sorted(set(range(256)) - set(s.encode("n=0 m=1n=1 m=2")))
        assert torch.equal(after["wte.weight"][unused], before["wte.weight"][unused])


def test_a_muon_checkpoint_resumes_only_in_its_own_learning_rate_units(tmp_path):
    """A Muon run in ``match_adam`` units resumed with the default ``original`` (or the reverse) took the same
    rates in other units: its next step was not the saved run's, silently (the checkpoint did not say)."""
    params = rlnb.MuonParams(learning_rate=0.01)
    kw = dict(model="tiny", optimizer="muon", threads=1)
    with local_session(muon_scaling="match_adam", checkpoint_dir=tmp_path, **kw) as s:
        _train(s, 2, params)
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=30).checkpoint.id)
        never_stopped = _train(s, 1, params)
    with pytest.raises(CheckpointMismatch, match=r"muon_scaling='match_adam' units, this session's in 'original'.*"
                                                 r"resume with muon_scaling='match_adam' \(over the API: "
                                                 r"scaling_strategy MUON_SCALING_STRATEGY_MATCH_ADAM\)"):  # fmt: skip
        local_session(resume_from=path, **kw)
    with local_session(resume_from=path, muon_scaling="match_adam", **kw) as r:
        assert r.step == 2 and _same(never_stopped, _train(r, 1, params))
    with local_session(resume_from=path, load_optimizer=False, **kw) as fresh:  # its weights only: a new run
        assert fresh.step == 0 and fresh.backend.optim.muon_scaling == "original"


def _crafted(path, tmp_path, change):
    state = torch.load(path, weights_only=True)
    change(state["optimizer"])
    crafted = tmp_path / f"crafted-{len(list(tmp_path.iterdir()))}.pt"
    torch.save(state, crafted)
    return crafted


def test_a_crafted_optimizer_state_is_refused_naming_the_weight_or_its_options_are_not_taken(tmp_path):
    """A training checkpoint's AdamW options were loaded as saved: ``maximize: True`` made the resumed run climb
    the loss, silently; moments of another shape failed the first optim-step ``INTERNAL_ERROR``; a negative step
    count or NaN moments turned the weights NaN at the first step, which COMPLETED."""
    params = rlnb.AdamParams(learning_rate=1e-2)
    with local_session(model="tiny", checkpoint_dir=tmp_path, threads=1) as s:
        _train(s, 2, params)
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=30).checkpoint.id)
        never_stopped = _train(s, 2, params)
    first = "wte.weight"  # the first weight AdamW updates

    def options(opt):
        for group in opt["adamw"]["param_groups"]:
            group.update(maximize=True, amsgrad=True, foreach=False)

    with local_session(model="tiny", resume_from=_crafted(path, tmp_path, options), threads=1) as r:
        assert _same(never_stopped, _train(r, 2, params))  # the same run: the state's options were not taken
    for change, says in (
        (lambda opt: opt["adamw"]["state"][0].update(exp_avg=torch.zeros(3, 3)), f"exp_avg for {first} is \\(3, 3\\)"),
        (lambda opt: opt["adamw"]["state"][0].pop("exp_avg_sq"), f"exp_avg_sq for {first} is NoneType"),
        (lambda opt: opt["adamw"]["state"][0]["exp_avg"].fill_(float("nan")), f"exp_avg for {first} is not finite"),
        (lambda opt: opt["adamw"]["state"][0]["step"].fill_(-3), f"step for {first} is -3, expected a whole number"),
    ):
        with pytest.raises(CheckpointMismatch, match=f"its optimizer state does not fit .*AdamW's {says}"):
            local_session(model="tiny", resume_from=_crafted(path, tmp_path, change))


@pytest.mark.parametrize(
    ("optimizer", "params", "field"),
    [
        ("adam", rlnb.AdamParams(learning_rate=1e39, weight_decay=0), "adam_params.learning_rate"),
        ("adam", rlnb.AdamParams(learning_rate=1e36, beta1=0.999, weight_decay=0), "adam_params.learning_rate"),
        ("muon", rlnb.MuonParams(learning_rate=1e39), "muon_params.learning_rate"),
        ("muon", rlnb.MuonParams(adam={"learning_rate": 1e39, "weight_decay": 0}), "muon_params.adam.learning_rate"),
    ],
)
def test_a_step_size_past_the_weights_dtype_fails_invalid_input_before_anything_moves(optimizer, params, field):
    """lr 1e39 (the API takes any finite double) failed the optim-step ``INTERNAL_ERROR`` ("value cannot be converted
    to type float without overflow") half-way: AdamW's moments and step count had moved, the weights had not, and
    the next step counted as AdamW's second."""
    with (
        local_session(model="tiny", optimizer=optimizer, threads=1) as s,
        local_session(model="tiny", optimizer=optimizer, threads=1) as twin,
    ):
        s.forward_backward([samples.cross_entropy(s.encode("n=1"))])
        with pytest.raises(rlnb.OperationFailed, match=rf"{field} is too large: .*past the 3.4e\+38") as info:
            s.optim_step(params).result(timeout=30)
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
        small = type(params)(learning_rate=1e-3)
        twin.forward_backward([samples.cross_entropy(twin.encode("n=1"))])
        assert _same(_train(s, 1, small), _train(twin, 1, small))  # as if the refused step had never been asked


def test_a_batched_member_whose_step_its_weights_cannot_take_fails_alone_naming_the_field():
    """In an ensemble, eps 1e-50 or lr 1e39 turned that member's weights NaN / inf at its first step (the step
    completed), and it failed a step later as "the weights have diverged", naming neither field."""
    from rlnb.batched import Member, run_batched

    bad = {"eps": rlnb.AdamParams(eps=1e-50), "learning_rate": rlnb.AdamParams(learning_rate=1e39, weight_decay=0)}
    members = [Member(p) for p in bad.values()] + [Member(rlnb.AdamParams(learning_rate=1e-3))]
    results = run_batched("tiny", "adam", members, steps=2, keep_weights=True, device="cpu", threads=1)
    for result, field in zip(results, bad, strict=False):
        said = f"ValueError: adam_params.{field} "  # refused before its step is sampled, as rl_step refuses it alone
        assert result.status == "FAILED" and result.reason.startswith(said), result.reason
        assert result.losses == [] and all(w.isfinite().all() for w in result.weights.values())
    assert results[-1].status == "COMPLETED" and len(results[-1].losses) == 2


@pytest.mark.parametrize(
    ("optimizer", "params", "field"),
    [
        ("adam", {"learning_rate": 20.0}, "adam_params.weight_decay = 0.1"),  # the default decay, 20 * 0.1 = 2
        ("adam", {"learning_rate": 1.0, "weight_decay": 1.0}, "adam_params.weight_decay = 1.0"),  # 1 - 1: erased
        ("muon", {"learning_rate": 0.5, "weight_decay": 4.0}, "muon_params.weight_decay = 4.0"),
        ("muon", {"adam": {"learning_rate": 1.0, "weight_decay": 3.0}}, "muon_params.adam.weight_decay = 3.0"),
    ],
)
def test_a_decay_that_would_erase_the_weights_is_refused_built_or_sent(optimizer, params, field):
    """Decoupled decay multiplies every weight by 1 - learning_rate * weight_decay each step: at 1 the step erased
    them, past it flipped their signs, and the optim-step COMPLETED. Params are refused when built; a body sent as it
    is (as over ``rlnb serve``) fails INVALID_INPUT with the same rule, the weights untouched."""
    rule = r"is invalid: learning_rate \* weight_decay must be < 1, got "
    with pytest.raises(rlnb.InvalidParams, match=rule):
        (rlnb.AdamParams if optimizer == "adam" else rlnb.MuonParams)(**params)
    body = wire.OptimStepBody(**{wire.OPTIMIZER_PARAMS_FIELD[optimizer]: params})
    with local_session(model="tiny", optimizer=optimizer, threads=1) as s:
        message = _refused_as_sent(s, body)
        assert re.match(re.escape(field) + " " + rule, message), message


def _weights(s):
    return {k: v.detach().clone() for k, v in s.backend.trainer.state_dict().items()}


def _refused_as_sent(s, body):
    """Submit ``body`` as it is (as over ``rlnb serve``) after a forward-backward: the optim-step must fail
    INVALID_INPUT with the weights untouched; its message is returned."""
    s.forward_backward([samples.cross_entropy(s.encode("n=1"))])
    s.wait()
    before, got = _weights(s), []
    s.backend.submit(wire.OperationKind.OPTIM_STEP, body, got.append)
    s.backend.wait_idle()
    assert got[-1].status == wire.OperationStatus.FAILED and _same(_weights(s), before)
    assert got[-1].error.code == wire.OperationErrorCode.INVALID_INPUT
    return got[-1].error.message


@pytest.mark.parametrize(
    ("dtype", "least"), [(torch.float32, 1.4e-45), (torch.bfloat16, 9.18e-41), (torch.float16, 5.96e-08)]
)
def test_the_least_eps_is_the_one_the_error_names(dtype, least):
    """eps 1e-45 (it rounds up in float32) passed though the error said "give eps >= 1.4e-45": what is refused is
    what the error and docs/optimizers.md say, and the value they name passes."""
    from rlnb.engine.optim.limits import StepLimits
    from rlnb.params import AdamParams

    limits = StepLimits(adam_dtypes=[dtype], muon_dtypes=[])
    limits.check(AdamParams(eps=least).resolved())
    refused = rf"adam_params.eps .* in {str(dtype)[6:]}, .*give adam_params.eps >= {least:g}"
    with pytest.raises(ValueError, match=refused):
        limits.check(AdamParams(eps=least * 0.99).resolved())


def test_a_muon_adam_clip_sent_as_it_is_fails_invalid_input_and_a_corrected_step_trains():
    """``muon_params.adam.grad_clip_norm`` was taken and never read (the clip is Muon's own, one global norm): a body
    sent as it is (as over ``rlnb serve``) with another value fails INVALID_INPUT naming it, the weights untouched
    and the gradients kept for the corrected step, which clips by Muon's grad_clip_norm."""
    body = wire.OptimStepBody(muon_params=wire.MuonParams(adam=wire.AdamParams(grad_clip_norm=1e-3)))
    with local_session(model="tiny", optimizer="muon", threads=1) as s:
        before = _weights(s)
        message = _refused_as_sent(s, body)
        assert message.startswith(
            "muon_params.adam.grad_clip_norm = 0.001 is invalid: must be unset or equal to grad_clip_norm (1)"
        ), message
        assert any(p.grad is not None for p in s.backend.trainer.parameters())
        metrics = s.optim_step(rlnb.MuonParams(grad_clip_norm=1e-3)).result(timeout=30).metrics
        assert metrics["grad_clip_norm"] == 1e-3 and metrics["clip_coef"] < 1 and not _same(_weights(s), before)


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_an_optim_step_with_no_forward_backward_counts_a_step_and_moves_nothing(optimizer):
    """docs/optimizers.md: with no gradient, no weight moves (no decay either, as torch's AdamW skips a parameter
    without a gradient), the step counts and its grad_norm is 0; the next forward-backward trains as usual."""
    params = rlnb.AdamParams(weight_decay=0.5) if optimizer == "adam" else rlnb.MuonParams(weight_decay=0.5)
    with local_session(model="tiny", optimizer=optimizer, threads=1) as s:
        before = _weights(s)
        result = s.optim_step(params).result(timeout=30)
        assert result.step == 1 and result.metrics["grad_norm"] == 0.0 and _same(_weights(s), before)
        s.forward_backward([samples.cross_entropy(s.encode("n=1"))])
        assert s.optim_step(params).result(timeout=30).step == 2 and not _same(_weights(s), before)
