"""The in-process backend under faults and hostile input (issue 19 §1.16): a disk that fills up during a
checkpoint save, NaN custom gradients, and ``loss_fn_inputs`` keys that would be silently ignored."""

import errno
import io
import math
import re

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.engine import checkpoint_files, checkpoints


class FullDisk(io.RawIOBase):
    """A file on a disk with ``room`` bytes left: the next write past it fails as a full disk does."""

    def __init__(self, room: int):
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(b) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(b)
        return len(b)


def local_session(**kw):
    return rlnb.connect("local", device="cpu", record=False, **kw)


def test_a_disk_that_fills_up_during_a_checkpoint_save_is_resource_exhausted_and_leaves_nothing(tmp_path, monkeypatch):
    """torch.save on a full disk says ``[enforce fail at inline_container.cc:672] . unexpected pos``; the
    operation says the disk is full, and no half-written checkpoint is left to resume from."""
    real_open = open

    def full_after_1kb(path, mode="r", *args, **kwargs):
        if "w" in mode and str(path).startswith(str(tmp_path)):
            real_open(path, mode).close()  # the file exists, as a real one would, before the write fails
            return io.BufferedWriter(FullDisk(1024))
        return real_open(path, mode, *args, **kwargs)

    with local_session(model="tiny", checkpoint_dir=tmp_path) as s:
        monkeypatch.setattr(checkpoints, "open", full_after_1kb, raising=False)
        with pytest.raises(rlnb.OperationFailed) as info:
            s.save_training_checkpoint().result(timeout=30)
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
        assert "the disk is full" in info.value.message and str(tmp_path) in info.value.message
        assert "unexpected pos" not in info.value.message
        assert list(tmp_path.iterdir()) == []  # the partial .pt was removed
        monkeypatch.undo()
        assert s.save_training_checkpoint().result(timeout=30).checkpoint.step == 0  # space again: it saves


def test_a_save_cut_short_leaves_no_checkpoint_under_its_name(tmp_path, monkeypatch):
    """adv5b: a process killed mid-save left a partial ``<id>.pt`` (refused at resume, but there under the
    checkpoint's name). The save writes a hidden ``.<id>.pt.<host>-<pid>-<nonce>.partial`` and renames it once
    whole."""
    from torch import nn

    def killed(obj, fh, *args, **kwargs):
        fh.write(b"half a checkpoint")
        raise KeyboardInterrupt  # not an Exception: nothing cleans up, as when the process dies here

    monkeypatch.setattr(checkpoints.torch, "save", killed)
    path = tmp_path / "ckpt-train-1.pt"
    with pytest.raises(KeyboardInterrupt):
        checkpoints.save_training(path, nn.Linear(2, 2), {}, 0, {})
    (left,) = tmp_path.iterdir()
    assert not path.exists() and re.fullmatch(r"\.ckpt-train-1\.pt\.[0-9a-f]{8}-\d+-[0-9a-f]{8}\.partial", left.name)
    monkeypatch.undo()
    checkpoints.save_training(path, nn.Linear(2, 2), {}, 0, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == [left.name, "ckpt-train-1.pt"]  # the same name: renamed


def test_a_full_disk_under_an_inference_checkpoint_is_resource_exhausted(tmp_path, monkeypatch):
    """safetensors reports a full disk as ``I/O error: No space left on device (os error 28)``."""
    from safetensors import SafetensorError
    from safetensors import torch as st

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with local_session(model="tiny", checkpoint_dir=tmp_path) as s:
        monkeypatch.setattr(st, "save_file", full)
        with pytest.raises(rlnb.OperationFailed) as info:
            s.save_inference_checkpoint().result(timeout=30)
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
        assert "the disk is full" in info.value.message
        assert list(tmp_path.iterdir()) == []  # the folder with its config.json went too


def test_disk_full_is_read_down_the_exception_chain_and_not_guessed():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from None
    except RuntimeError as exc:
        chained = exc
    assert chained.__cause__ is None and checkpoint_files.disk_full(chained)  # the context still holds the errno
    assert checkpoint_files.disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not checkpoint_files.disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not checkpoint_files.disk_full(RuntimeError("unexpected pos 1 vs 2"))


@pytest.mark.parametrize("bad", [math.nan, math.inf, 1e300])
def test_non_finite_custom_gradients_fail_non_finite_loss_and_accumulate_nothing(bad):
    with local_session(model="tiny") as s:
        body = wire.CustomForwardBackwardBody(
            samples=[samples.cross_entropy([1, 2, 3, 4])], gradients=[wire.GradientTensor(data=[0.1, bad, 0.1])]
        )
        got: list[wire.Operation] = []
        s.backend.submit("custom-forward-backward", body, got.append)
        s.backend.wait_idle(30)
        assert got[-1].status == wire.OperationStatus.FAILED, got[-1]
        assert got[-1].error.code == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
        assert "gradients[0]" in got[-1].error.message
        assert all(p.grad is None for p in s.backend.trainer.parameters())


def test_a_loss_input_that_would_be_ignored_fails_invalid_input_naming_it():
    sample = samples.cross_entropy([1, 2, 3])
    sample.loss_fn_inputs["weight"] = sample.loss_fn_inputs.pop("weights")  # misspelt: would train on every token
    policy = samples.policy([1], [2, 3], [-1.0, -1.0], 1.0)
    with local_session(model="tiny") as s:
        for batch, loss, says in (
            ([sample], "cross_entropy", "no loss reads input 'weight'"),
            ([policy], "cross_entropy", "LOSS_TYPE_CROSS_ENTROPY does not read input 'mask'"),  # only weights
        ):
            with pytest.raises(rlnb.OperationFailed, match=says) as info:
                s.forward_backward(batch, loss).result(timeout=30)
            assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
        ridealong = samples.policy([1], [2, 3], [-1.0, -1.0], 1.0, reference_logprobs=[-1.0, -1.0])
        for loss in ("grpo", "ppo"):  # PPO ignores reference_logprobs: one batch may serve several losses
            assert s.forward_backward([ridealong], loss).result(timeout=30).metrics["loss/tokens"] == 2
        custom = sample.model_copy(deep=True)
        body = wire.CustomForwardBackwardBody(samples=[custom], gradients=[wire.GradientTensor(data=[0.1, 0.1])])
        got: list[wire.Operation] = []
        s.backend.submit("custom-forward-backward", body, got.append)
        s.backend.wait_idle(30)
        assert got[-1].error.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
        assert "no loss reads input 'weight'" in got[-1].error.message


def test_an_overflowing_ratio_fails_the_forward_backward_not_the_next_step():
    """Sampler log-probs far below the policy's overflow e^(lp - q) to inf. PPO's clipped term keeps the loss
    finite, but the gradient of the unclipped one is inf x 0 = NaN: the forward-backward fails, naming the
    metric, accumulates nothing, and the session trains on."""
    with local_session(model="tiny") as s:
        bad = samples.policy(list(b"3+4="), list(b"7!"), [-100.0, -100.0], 1.0)
        with pytest.raises(rlnb.errors.OperationFailed) as err:
            s.forward_backward([bad], "ppo").result(60)
        assert err.value.code == wire.OperationErrorCode.NON_FINITE_LOSS
        assert "loss/ratio/mean is inf" in str(err.value) and "no gradients were accumulated" in str(err.value)
        s.forward_backward([samples.policy(list(b"3+4="), list(b"7!"), [-2.0, -2.0], 1.0)], "ppo").result(60)
        assert math.isfinite(s.optim_step().result(60).metrics["grad_norm"])


def _custom(s, sample, gradient):
    body = wire.CustomForwardBackwardBody(samples=[sample], gradients=[wire.GradientTensor(data=gradient)])
    got: list[wire.Operation] = []
    s.backend.submit("custom-forward-backward", body, got.append)
    s.backend.wait_idle(30)
    return got[-1]


def test_custom_forward_backward_refuses_float_targets_and_two_masks_and_accumulates_nothing():
    """Float32 ``target_tokens`` reached torch's gather (``INTERNAL_ERROR``: "Expected dtype int64 for index");
    ``weights`` and ``mask`` together trained by ``weights`` alone, silently (a forward-backward refuses both).
    A bad tensor is refused by the forward-backward's own check (``losses.check_input``), in its words."""
    floats = samples.cross_entropy([1, 2, 3, 4])
    floats.loss_fn_inputs["target_tokens"] = wire.TensorData(data=[2.0, 3.5, 4.0], dtype="float32")
    both = samples.cross_entropy([1, 2, 3, 4])
    both.loss_fn_inputs["mask"] = wire.TensorData(data=[0, 0, 1], dtype="int64")
    short = samples.cross_entropy([1, 2, 3, 4])
    short.loss_fn_inputs["weights"] = wire.TensorData(data=[1.0, 1.0], dtype="float32")
    huge = samples.cross_entropy([1, 2, 3, 4])  # finite as JSON, inf as float32: a forward-backward refuses it
    huge.loss_fn_inputs["weights"] = wire.TensorData(data=[1.0, 1e39, 1.0], dtype="float32")
    with local_session(model="tiny") as s:
        for sample, says in (
            (floats, "samples[0].loss_fn_inputs.target_tokens must be torch.int64, got torch.float32"),
            (both, "samples[0].loss_fn_inputs: give either weights or mask, not both"),
            (short, "samples[0].loss_fn_inputs.weights must be 1-D of length 3 (the model input's), got (2,)"),
            (huge, "samples[0].loss_fn_inputs.weights has non-finite values"),
        ):
            op = _custom(s, sample, [1.0, 1.0, 1.0])
            assert op.status == wire.OperationStatus.FAILED, op
            assert op.error.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
            assert says in op.error.message
            assert all(p.grad is None for p in s.backend.trainer.parameters())
        assert _custom(s, samples.cross_entropy([1, 2, 3, 4]), [1.0, 1.0, 1.0]).status == wire.OperationStatus.COMPLETED


@pytest.mark.parametrize(
    "loss, says",
    [
        (wire.LossConfig(type="LOSS_TYPE_UNSPECIFIED"), "loss.type must be one of LOSS_TYPE_CROSS_ENTROPY, "),
        (wire.LossConfig(type="LOSS_TYPE_DRO"), "loss.dro_params is required for LOSS_TYPE_DRO (beta: no default)"),
        (  # another loss's params object: refused, not silently ignored
            wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY", grpo_params=wire.GrpoLossParams(beta=0.5)),
            "loss.grpo_params does not apply to LOSS_TYPE_CROSS_ENTROPY, which takes cross_entropy_params",
        ),
    ],
)
def test_a_loss_config_sent_straight_to_the_backend_fails_invalid_input_as_rlnb_serve_answers(loss, says):
    """The engine makes the client's and the server's one check (``wire.loss_problem``), in the same words."""
    with local_session(model="tiny") as s:
        got: list[wire.Operation] = []
        body = wire.ForwardBackwardBody(samples=[samples.cross_entropy([1, 2, 3])], loss=loss)
        s.backend.submit("forward-backward", body, got.append)
        s.backend.wait_idle(30)
        assert got[-1].error.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
        assert got[-1].error.message.startswith(says), got[-1].error.message
        assert all(p.grad is None for p in s.backend.trainer.parameters())
