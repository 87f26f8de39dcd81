"""A training checkpoint's optimizer state crafted to values no real run reaches: refused at resume naming the tensor,
never a resumed session whose first optim-step COMPLETES with NaN weights."""

import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.engine.checkpoints import CheckpointMismatch


def _saved(tmp_path, **kw):
    """A checkpoint after two steps (so AdamW's moments and Muon's momentum exist), and its path."""
    with rlnb.connect("local", model="tiny", device="cpu", record=False, checkpoint_dir=tmp_path, threads=1, **kw) as s:
        for i in range(2):
            s.forward_backward([samples.cross_entropy(s.encode(f"n={i} m={i + 1}"))])
            s.optim_step()
        return s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=30).checkpoint.id)


def _crafted(path, tmp_path, change):
    state = torch.load(path, weights_only=True)
    change(state["optimizer"])
    crafted = tmp_path / "crafted.pt"
    torch.save(state, crafted)
    return crafted


def test_a_negative_second_moment_is_refused_at_resume_naming_the_weight(tmp_path):
    """exp_avg_sq is a running mean of squares: one crafted -1 made sqrt(exp_avg_sq) NaN at that weight, and the
    resumed session's first optim-step COMPLETED with NaN weights (only finiteness was checked)."""
    path = _saved(tmp_path)

    def negative(opt):
        opt["adamw"]["state"][0]["exp_avg_sq"].view(-1)[3] = -1.0

    with pytest.raises(CheckpointMismatch, match="AdamW's exp_avg_sq for wte.weight has 1 negative value"):
        rlnb.connect("local", model="tiny", device="cpu", record=False, resume_from=_crafted(path, tmp_path, negative))


def test_a_muon_momentum_buffer_that_is_not_finite_is_refused_at_resume_naming_it(tmp_path):
    """Muon's momentum feeds Newton-Schulz: one inf in a saved buffer made that matrix's update NaN."""
    path = _saved(tmp_path, optimizer="muon")

    def infinite(opt):
        name, buf = next(iter(opt["momentum"].items()))
        buf.view(-1)[0] = float("inf")
        infinite.name = name

    crafted = _crafted(path, tmp_path, infinite)
    with pytest.raises(CheckpointMismatch, match=f"momentum buffer '{infinite.name}' is not finite"):
        rlnb.connect("local", model="tiny", device="cpu", record=False, optimizer="muon", resume_from=crafted)


def test_a_run_resumed_in_another_dtype_is_refused_and_its_weights_alone_are_cast(tmp_path):
    """A float32 run resumed with dtype="bfloat16" went on in bfloat16, its weights and AdamW's moments cast, without
    a word (a LoRA resume refused it): not the run that was saved. Its weights alone (load_optimizer=False, or an
    inference checkpoint) start a new run, cast to the session's dtype as a model folder would be."""
    path = _saved(tmp_path, dtype="float32")
    with rlnb.connect("local", model="tiny", device="cpu", record=False, checkpoint_dir=tmp_path / "i") as s:
        folder = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=30).checkpoint.id)
    saved = torch.load(path, weights_only=True)["weights"]
    said = (r"its run trained float32 weights, this session's are bfloat16: .*resume with dtype='float32', or "
            r"load_optimizer=False")  # fmt: skip
    with pytest.raises(CheckpointMismatch, match=said):
        rlnb.connect("local", model="tiny", device="cpu", record=False, resume_from=path, dtype="bfloat16")
    for resume, kw in ((path, {"load_optimizer": False}), (folder, {})):
        with rlnb.connect("local", model="tiny", device="cpu", record=False, resume_from=resume, dtype="bfloat16",
                          **kw) as r:  # fmt: skip
            weights = r.backend.trainer.state_dict()
            assert r.step == 0 and all(w.dtype == torch.bfloat16 for w in weights.values())
            if resume == path:
                assert all(torch.equal(weights[k], v.to(torch.bfloat16)) for k, v in saved.items())
            r.forward_backward([samples.cross_entropy(r.encode("n=1 m=2"))])
            assert r.optim_step().result(timeout=30).step == 1
    with rlnb.connect("local", model="tiny", device="cpu", record=False, resume_from=path, dtype="float32") as same:
        assert same.step == 2
