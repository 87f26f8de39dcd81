"""A resume that fails leaves the model given as ``model=`` as it was: a checkpoint of another shape is refused
before any of its tensors is copied in (torch's ``load_state_dict`` copies every tensor that fits, then raises)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rlnb
from rlnb import samples
from rlnb.engine.checkpoints import CheckpointMismatch
from rlnb.engine.models.factory import build_model

VOCAB = 256


class Stack(nn.Module):
    """Ids to logits through ``width``-wide layers: two stacks of one class, of other widths, share a name
    (``custom/Stack``) and some tensor shapes (the embedding's rows, the head's bias)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        self.mid = nn.Linear(8, width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mid(self.embed(ids))))


@pytest.mark.slow
def test_a_checkpoint_of_another_shape_leaves_the_users_model_untouched(tmp_path):
    options = {"device": "cpu", "threads": 1, "record": False, "checkpoint_dir": tmp_path}
    saved, _ = _saved(tmp_path)
    torch.manual_seed(2)
    mine = Stack(32)
    before = {k: v.clone() for k, v in mine.state_dict().items()}
    with pytest.raises(CheckpointMismatch, match="does not fit this session's model") as caught:
        rlnb.connect("local", model=mine, resume_from=saved, **options)
    assert "mid.weight" in str(caught.value)
    after = mine.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == []  # embed.weight and head.bias fit: torch copied them in before it raised
    with rlnb.connect("local", model=mine, **options) as again:  # the model is free and whole for a new session
        assert torch.equal(again.backend.engine.trainer.embed.weight.detach(), before["embed.weight"])


@pytest.mark.slow
def test_a_refused_lora_resume_leaves_the_users_model_unadapted(tmp_path):
    """A LoRA resume refused for its settings (another ``alpha``) adapted the ``model=`` module in place first: the
    refusal's advice, ``resume with lora={... 'alpha': 8 ...}``, was then refused on that module ("adapted in place
    by an earlier LoRA session"), and so was any session on it."""
    options = {"device": "cpu", "threads": 1, "record": False, "checkpoint_dir": tmp_path}
    saved = _saved_lora(tmp_path, {"rank": 4, "alpha": 8})
    mine = build_model("tiny", 0)
    modules = [name for name, _ in mine.named_modules()]
    with pytest.raises(CheckpointMismatch, match="LoRA alpha is 8, this session's is 16"):
        rlnb.connect("local", model=mine, lora={"rank": 4, "alpha": 16}, resume_from=saved, **options)
    assert [name for name, _ in mine.named_modules()] == modules
    assert all(p.requires_grad for p in mine.parameters())
    with rlnb.connect("local", model=mine, lora={"rank": 4, "alpha": 8}, resume_from=saved, **options) as again:
        assert again.step == 1  # the advice taken, on the same module


def _saved_lora(tmp_path, lora: dict) -> object:
    """The training checkpoint of a built-in ``tiny`` session with ``lora`` that took one step."""
    options = {"device": "cpu", "threads": 1, "record": False, "checkpoint_dir": tmp_path}
    with rlnb.connect("local", model=build_model("tiny", 0), lora=lora, **options) as s:
        s.forward_backward([samples.cross_entropy(list(b"adapted"))])
        s.optim_step()
        return s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)


def _saved(tmp_path):
    """A training checkpoint of a ``Stack(16)`` session that took one step, and its contents."""
    options = {"device": "cpu", "threads": 1, "record": False, "checkpoint_dir": tmp_path}
    with rlnb.connect("local", model=Stack(16), seed=1, **options) as s:
        s.forward_backward([samples.cross_entropy(list(b"stack"))])
        s.optim_step()
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
    return path, torch.load(path, weights_only=True)


def _refused_leaves_module(resume_from, error: type[Exception], match: str, optimizer: str = "adam") -> None:
    """Resuming a fresh ``Stack(16)`` from ``resume_from`` is refused, and leaves the module's tensors as they were."""
    torch.manual_seed(2)
    mine = Stack(16)
    before = {k: v.clone() for k, v in mine.state_dict().items()}
    with pytest.raises(error, match=match):
        rlnb.connect(
            "local", optimizer=optimizer, model=mine, resume_from=resume_from, device="cpu", threads=1, record=False
        )
    after = mine.state_dict()
    assert [k for k in before if not torch.equal(before[k], after[k])] == []
    assert all(p.grad is None for p in mine.parameters())


@pytest.mark.slow
def test_an_adam_checkpoint_refused_by_a_muon_session_leaves_the_users_model_untouched(tmp_path):
    path, _ = _saved(tmp_path)
    _refused_leaves_module(path, CheckpointMismatch, "optimizer state does not fit this session's muon", "muon")


@pytest.mark.slow
def test_a_damaged_optimizer_state_leaves_the_users_model_untouched(tmp_path):
    path, state = _saved(tmp_path)
    state["optimizer"]["adamw"]["state"][0]["exp_avg"] = torch.zeros(3)  # not the shape of its weight
    torch.save(state, tmp_path / "damaged.pt")
    _refused_leaves_module(tmp_path / "damaged.pt", CheckpointMismatch, "exp_avg for embed.weight is \\(3,\\)")


@pytest.mark.slow
def test_a_sample_generator_state_of_the_wrong_size_leaves_the_users_model_untouched(tmp_path):
    path, state = _saved(tmp_path)
    state["sample_rng"] = torch.zeros(10, dtype=torch.uint8)
    torch.save(state, tmp_path / "short_rng.pt")
    _refused_leaves_module(tmp_path / "short_rng.pt", ValueError, "its sample_rng is no generator state")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sparse", "meta"])
def test_a_weight_that_is_no_dense_tensor_is_named_and_leaves_the_users_model_untouched(tmp_path, kind):
    """A sparse weight (or one on the meta device, which holds no values) was torch's raw NotImplementedError (or
    RuntimeError) from the finite check, naming no file."""
    path, state = _saved(tmp_path)
    weight = state["weights"]["mid.weight"]
    state["weights"]["mid.weight"] = weight.to_sparse() if kind == "sparse" else torch.empty_like(weight, device="meta")
    torch.save(state, tmp_path / f"{kind}.pt")
    _refused_leaves_module(tmp_path / f"{kind}.pt", ValueError, f"its weights' 'mid.weight' is a {kind} tensor")


@pytest.mark.slow
def test_a_lora_resume_refused_for_its_optimizer_state_leaves_the_users_model_unadapted(tmp_path):
    """The optimizer state is checked against the adapted model (its LoRA factors are the weights it moves): a
    refusal there left the ``model=`` module adapted in place, refused by every later session."""
    options = {"device": "cpu", "threads": 1, "record": False, "checkpoint_dir": tmp_path}
    lora = {"rank": 4, "alpha": 8}
    saved = _saved_lora(tmp_path, lora)
    mine = build_model("tiny", 0)
    modules = [name for name, _ in mine.named_modules()]
    before = {k: v.clone() for k, v in mine.state_dict().items()}
    with pytest.raises(CheckpointMismatch, match="optimizer state does not fit this session's muon"):
        rlnb.connect("local", optimizer="muon", model=mine, lora=lora, resume_from=saved, **options)
    assert [name for name, _ in mine.named_modules()] == modules
    assert all(p.requires_grad for p in mine.parameters())
    after = mine.state_dict()
    assert list(after) == list(before) and all(torch.equal(before[k], after[k]) for k in before)
    with rlnb.connect("local", model=mine, lora=lora, resume_from=saved, **options) as again:
        assert again.step == 1  # the same module resumes in the checkpoint's optimizer


@pytest.mark.slow
def test_an_undo_that_fails_leaves_the_refusal_the_error_with_a_note(tmp_path, monkeypatch):
    """Putting the module back raising inside the refusal's handler replaced the refusal: the user read the undo's
    error, the ``CheckpointMismatch`` only as its ``__context__``."""
    from rlnb.engine import model_setup

    def broken(adapted, model):
        raise RuntimeError("peft could not unload")

    monkeypatch.setattr(model_setup, "undo_lora", broken)
    options = {"device": "cpu", "threads": 1, "record": False, "checkpoint_dir": tmp_path}
    lora = {"rank": 4, "alpha": 8}
    saved = _saved_lora(tmp_path, lora)
    with pytest.raises(CheckpointMismatch, match="optimizer state does not fit") as refused:
        rlnb.connect("local", optimizer="muon", model=build_model("tiny", 0), lora=lora, resume_from=saved, **options)
    assert any("peft could not unload" in note for note in getattr(refused.value, "__notes__", []))


@pytest.mark.slow
def test_a_lora_dropout_generator_state_of_the_wrong_size_is_named_and_leaves_the_users_model_unadapted(tmp_path):
    options = {"device": "cpu", "threads": 1, "record": False, "checkpoint_dir": tmp_path}
    lora = {"rank": 4, "alpha": 8, "dropout": 0.1}
    with rlnb.connect("local", model=build_model("tiny", 0), lora=lora, **options) as s:
        s.forward_backward([samples.cross_entropy(list(b"adapted"))])
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
    state = torch.load(path, weights_only=True)
    state["dropout_rng"] = torch.zeros(10, dtype=torch.uint8)
    torch.save(state, tmp_path / "short_dropout_rng.pt")
    mine = build_model("tiny", 0)
    modules = [name for name, _ in mine.named_modules()]
    with pytest.raises(ValueError, match="its dropout_rng is no generator state"):
        rlnb.connect("local", model=mine, lora=lora, resume_from=tmp_path / "short_dropout_rng.pt", **options)
    assert [name for name, _ in mine.named_modules()] == modules
    assert all(p.requires_grad and p.grad is None for p in mine.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("tied_config", [True, False], ids=["config-tied", "tied-by-hand"])
def test_a_refused_resume_of_an_untied_head_leaves_the_users_gpt2_tied(hf_dirs, tmp_path, tied_config):
    """A full-weight checkpoint whose head was trained apart from GPT-2's tied embedding unties the session's head
    before its optimizer is built (the optimizer state has one weight more); an optimizer refusal then left the
    user's module untied, its head and embedding trained apart by every later session. The config's
    ``tie_word_embeddings`` comes back as it was too (a head tied by hand, the config saying False, came back True)."""
    from transformers import AutoModelForCausalLM

    options = {"device": "cpu", "threads": 1, "record": False, "tokenizer": hf_dirs["gpt2"]}
    with rlnb.connect("local", model=AutoModelForCausalLM.from_pretrained(hf_dirs["gpt2"]), **options) as s:
        s.forward_backward([samples.cross_entropy(list(b"tied"))])
        s.optim_step()
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
    state = torch.load(path, weights_only=True)
    state["weights"]["lm_head.weight"] = state["weights"]["lm_head.weight"] + 0.01  # trained apart
    torch.save(state, tmp_path / "untied.pt")
    mine = AutoModelForCausalLM.from_pretrained(hf_dirs["gpt2"])
    mine.config.tie_word_embeddings = tied_config
    before = {k: v.clone() for k, v in mine.state_dict().items()}
    with pytest.raises(CheckpointMismatch, match="optimizer state does not fit"):
        rlnb.connect("local", model=mine, resume_from=tmp_path / "untied.pt", **options)
    assert mine.get_output_embeddings().weight is mine.get_input_embeddings().weight
    assert mine.config.tie_word_embeddings is tied_config
    assert all(torch.equal(before[k], v) for k, v in mine.state_dict().items())
