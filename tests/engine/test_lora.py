"""LoRA through peft on built-in and Hugging Face models: the maths, the shared base, the files."""

from __future__ import annotations

import warnings

import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.engine.checkpoints import CheckpointMismatch
from rlnb.engine.models.tiny import build_model
from tests.support.lora import BAD_LORA

pytestmark = pytest.mark.usefixtures("peft", "transformers")  # Hugging Face: slow, skipped without them


def lora_session(model, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("record", False)
    kw.setdefault("threads", 1)  # resumes are compared bit for bit: the thread tuner's counts would change the sums
    return rlnb.connect("local", model=model, **kw)


def train(s, text: str = "n=123 n=456", steps: int = 2) -> None:
    for _ in range(steps):
        s.forward_backward([samples.cross_entropy(s.encode(text))])
        s.optim_step(rlnb.AdamParams(learning_rate=0.05))
    s.weights_sync().result()


def test_lora_is_w_plus_scaled_ba_and_only_adapters_train():
    with lora_session("tiny", lora={"rank": 4, "alpha": 8}, seed=3) as s:
        base = build_model("tiny", seed=3)  # the same base weights
        train(s)
        trainer = s.backend.trainer
        trainable = [n for n, p in trainer.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n for n in trainable)
        layer = trainer.get_base_model().blocks[0].attn.c_attn
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        assert b.abs().sum() > 0  # trained away from peft's zero init
        x = torch.randn(3, 64)
        expected = base.blocks[0].attn.c_attn(x) + (8 / 4) * x @ a.T @ b.T
        torch.testing.assert_close(layer(x), expected, atol=1e-6, rtol=0)
        assert torch.equal(layer.base_layer.weight, base.blocks[0].attn.c_attn.weight)  # the base never moves


def test_the_sampler_shares_the_frozen_base():
    with lora_session("tiny", lora=True) as s:
        trainer, sampler = s.backend.trainer, s.backend.sampler
        shared = [p for p, q in zip(trainer.parameters(), sampler.parameters(), strict=True) if p is q]
        copied = [p for p, q in zip(trainer.parameters(), sampler.parameters(), strict=True) if p is not q]
        assert all(not p.requires_grad for p in shared) and all(
            "lora" in n for n, p in trainer.named_parameters() if any(p is c for c in copied)
        )
        assert sum(p.numel() for p in shared) > 5 * sum(p.numel() for p in copied)
        before = s.sample("n=", max_tokens=6, seed=1).result().results[0].sequences[0]
        train(s, steps=1)
        after = s.sample("n=", max_tokens=6, seed=1).result().results[0].sequences[0]
        assert before.logprobs != after.logprobs  # the sampler's adapter moved at weights-sync
    with lora_session("tiny") as full:  # full-weight sessions keep a separate sampler copy
        assert not any(
            p is q for p, q in zip(full.backend.trainer.parameters(), full.backend.sampler.parameters(), strict=True)
        )


def test_lora_seed_seeds_only_the_adapter():
    with lora_session("tiny", lora={"seed": 1}) as a, lora_session("tiny", lora={"seed": 2}) as b:
        pa, pb = dict(a.backend.trainer.named_parameters()), dict(b.backend.trainer.named_parameters())
        base = [n for n in pa if "lora_" not in n]
        assert base and all(torch.equal(pa[n], pb[n]) for n in base)
        assert any(not torch.equal(pa[n], pb[n]) for n in pa if "lora_A" in n)


@pytest.mark.parametrize("model", ["tiny", "gpt2", "llama"])
def test_inference_checkpoint_exports_the_adapter_for_peft_and_a_merged_model(
    hf_dirs, tmp_path, model, transformers, peft
):
    """ADAPTER loads with PeftModel.from_pretrained on the base, MERGED with AutoModelForCausalLM; both give
    the trained model's logits. GPT-2 ties its head to the embedding: train_unembed unties it on export."""
    spec = hf_dirs.get(model, model)
    with lora_session(spec, lora={"rank": 4, "alpha": 8, "train_unembed": True}, checkpoint_dir=tmp_path) as s:
        train(s)
        ckpt = s.save_inference_checkpoint().result().checkpoint
        folder = s.backend.checkpoint_path(ckpt.id)
        ids = torch.tensor([s.encode("n=42 the model")])
        with torch.no_grad():
            expected = s.backend.adapter.forward(s.backend.trainer, ids)
        files = {p.name for p in s.backend.checkpoint_files(ckpt.id, "adapter")}
        assert {"adapter_config.json", "adapter_model.safetensors"} <= files
    merged = transformers.AutoModelForCausalLM.from_pretrained(folder / "merged").eval()
    fresh = build_model("tiny", seed=0) if model == "tiny" else transformers.AutoModelForCausalLM.from_pretrained(spec)
    with warnings.catch_warnings():  # peft's own notes on tied heads and a transformers deprecation
        warnings.simplefilter("ignore")
        adapted = peft.PeftModel.from_pretrained(fresh, folder / "adapter").eval()
    with torch.no_grad():
        got_merged = merged(ids).logits
        got_adapter = adapted(ids) if model == "tiny" else adapted(input_ids=ids).logits
    torch.testing.assert_close(got_merged, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(got_adapter, expected, atol=1e-5, rtol=0)


def test_a_full_session_resumed_from_a_lora_merged_tied_model_is_the_trained_model(hf_dirs, tmp_path):
    """GPT-2 ties its head to the embedding; LoRA trains the head apart (train_unembed), so the merged model is
    untied. A full-weight session resumed from it unties its own head (loading both into the one shared tensor
    made it another model), and its own checkpoints resume as the same model again."""
    spec = hf_dirs["gpt2"]

    def logits(s, ids):
        with torch.no_grad():
            return s.backend.adapter.forward(s.backend.trainer, ids), s.backend.adapter.forward(s.backend.sampler, ids)

    with lora_session(spec, lora={"rank": 4, "alpha": 8}, checkpoint_dir=tmp_path) as s:
        train(s)
        folder = s.backend.checkpoint_path(s.save_inference_checkpoint().result().checkpoint.id)
        ids = torch.tensor([s.encode("n=42 the model")])
        expected, _ = logits(s, ids)
    with lora_session(spec, resume_from=folder, checkpoint_dir=tmp_path / "full") as r:
        for got in logits(r, ids):
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
        model = r.backend.adapter.module
        assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
        train(r, steps=1)
        path = r.backend.checkpoint_path(r.save_training_checkpoint().result().checkpoint.id)
        trained, _ = logits(r, ids)
    with lora_session(spec, resume_from=path) as again:
        torch.testing.assert_close(logits(again, ids)[0], trained, atol=1e-5, rtol=0)


def test_lora_training_checkpoint_holds_only_the_adapter_and_resumes(tmp_path):
    hp = rlnb.AdamParams(learning_rate=0.05)
    batch = [samples.cross_entropy(list(b"n=12345"))]
    with lora_session("tiny", lora={"rank": 2}, checkpoint_dir=tmp_path) as s:
        s.forward_backward(batch)
        s.optim_step(hp)
        ckpt = s.save_training_checkpoint().result().checkpoint
        s.forward_backward(batch)
        s.optim_step(hp).result()
        never_stopped = {k: v.clone() for k, v in s.backend.trainer.state_dict().items() if "lora_" in k}
        path = s.backend.checkpoint_path(ckpt.id)
    saved = torch.load(path, weights_only=True)
    assert saved["weights"] and all("lora_" in k for k in saved["weights"])
    with lora_session("tiny", lora={"rank": 2}, resume_from=path) as r:
        assert r.step == 1
        r.forward_backward(batch)
        r.optim_step(hp).result()
        got = {k: v for k, v in r.backend.trainer.state_dict().items() if "lora_" in k}
    assert all(torch.equal(got[k], never_stopped[k]) for k in never_stopped)
    with pytest.raises(CheckpointMismatch, match="checkpoint's LoRA rank is 2, this session's is 4"):
        lora_session("tiny", lora={"rank": 4}, resume_from=path)
    with pytest.raises(ValueError, match="differ in LoRA"):
        lora_session("tiny", resume_from=path)


def test_lora_dropout_resumes_bit_identical_and_leaves_the_global_rng_alone(tmp_path):
    """LoRA's dropout drew its masks from torch's global RNG, which no checkpoint saved and anything else in the
    process moves: a run resumed with dropout > 0 trained on other masks (other losses) than the run that never
    stopped, and every LoRA step moved the RNG of the user's and the other sessions' code."""
    lora, hp = {"rank": 2, "dropout": 0.3}, rlnb.AdamParams(learning_rate=0.05)
    batch = [samples.cross_entropy(list(b"n=12345 n=678"))]

    def steps(s, n):
        out = []
        for _ in range(n):
            out.append(s.forward_backward(batch).result().metrics)
            s.optim_step(hp).result()
        return out

    with lora_session("tiny", lora=lora, checkpoint_dir=tmp_path) as s:
        steps(s, 2)
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
        global_rng = torch.get_rng_state()
        never_stopped = steps(s, 2)
        assert torch.equal(torch.get_rng_state(), global_rng)  # the session's own generator, not the process's
        weights = {k: v.clone() for k, v in s.backend.trainer.state_dict().items() if "lora_" in k}
    torch.manual_seed(12345)  # what else the process draws in between
    with lora_session("tiny", lora=lora, resume_from=path) as r:
        assert steps(r, 2) == never_stopped
        got = {k: v for k, v in r.backend.trainer.state_dict().items() if "lora_" in k}
    assert all(torch.equal(got[k], weights[k]) for k in weights)


def test_a_lora_resume_refuses_other_lora_settings_or_another_base_seed(tmp_path):
    """alpha, dropout and train_unembed change the resumed model (or which layers it adapts) as rank does; a
    built-in model's LoRA checkpoint keeps only the adapter, so its base seed must be the session's too."""
    batch = [samples.cross_entropy(list(b"n=12345"))]
    with lora_session("tiny", lora={"rank": 2, "alpha": 8}, seed=3, checkpoint_dir=tmp_path) as s:
        s.forward_backward(batch)
        s.optim_step(rlnb.AdamParams(learning_rate=0.05))
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
        loss = s.forward_backward(batch, forward_only=True).result().loss
    assert torch.load(path, weights_only=True)["seed"] == 3
    for lora, seed, message in (
        ({"rank": 2, "alpha": 16}, 3, "LoRA alpha is 8, this session's is 16"),
        ({"rank": 2, "alpha": 8, "dropout": 0.1}, 3, "LoRA dropout is 0.0, this session's is 0.1"),
        ({"rank": 2, "alpha": 8, "train_unembed": False}, 3, "LoRA train_unembed is True, this session's is False"),
        ({"rank": 2, "alpha": 8}, 0, "checkpoint's seed is 3, this session's is 0.*resume with seed=3"),
    ):
        with pytest.raises(CheckpointMismatch, match=message):
            lora_session("tiny", lora=lora, seed=seed, resume_from=path)
    with pytest.raises(CheckpointMismatch, match=r"trained on float32 base weights, this session's are bfloat16: .*"
                                                  r"resume with dtype='float32'"):  # fmt: skip
        lora_session("tiny", lora={"rank": 2, "alpha": 8}, seed=3, dtype="bfloat16", resume_from=path)
    with lora_session("tiny", lora={"rank": 2, "alpha": 8, "seed": 9}, seed=3, resume_from=path) as r:
        assert r.forward_backward(batch, forward_only=True).result().loss == loss  # LoRA's own seed: only the init


def test_lora_takes_true_false_none_or_a_dict_and_refuses_anything_else():
    for lora, message in BAD_LORA:
        with pytest.raises(ValueError, match=message):
            lora_session("tiny", lora=lora)
    for lora, expected in ((None, None), (False, None), (True, 8), ({}, 8), ({"rank": 2}, 2)):
        with lora_session("tiny", lora=lora) as s:  # an empty dict is LoRA with the defaults, as remotely
            assert (s.backend.lora.rank if s.backend.lora else None) == expected


def test_a_module_an_earlier_lora_session_adapted_is_refused_not_trained_with_its_adapters():
    """peft adapts the module it is given in place and freezes its weights: given again (a notebook cell run twice,
    LoRA then full weights), a full-weight session trained only the earlier session's adapters and a LoRA session
    put adapters on those adapters, both from the earlier run's weights, silently."""
    model = build_model("tiny", seed=1)
    with lora_session(model, lora={"rank": 2}) as s:
        train(s, steps=1)
    for lora in (None, {"rank": 2}):
        with pytest.raises(ValueError, match=r"model \(TinyTransformer\) was adapted in place by an earlier LoRA "
                                             r"session.*pass a fresh instance"):  # fmt: skip
            lora_session(model, lora=lora)
    with lora_session(build_model("tiny", seed=1)) as fresh:  # a fresh instance trains every weight
        assert all(p.requires_grad for p in fresh.backend.trainer.parameters())


class _NoLinear(torch.nn.Module):
    """Logits from an embedding and a bare weight matrix: no layer LoRA adapts."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(256, 8)
        self.out = torch.nn.Parameter(torch.zeros(8, 256))

    def forward(self, idx):
        return self.emb(idx) @ self.out


def test_lora_on_a_model_without_linear_layers_says_so():
    """peft's NoMatchingPeftModuleError: "No `target_modules` passed but also no `target_parameters` found", about
    an argument rlnb chooses."""
    with pytest.raises(ValueError, match=r"lora: model \(_NoLinear\) has no linear layer for LoRA to adapt"):
        lora_session(_NoLinear(), lora=True)
    with lora_session(_NoLinear()) as s:  # all its weights train
        assert {n for n, p in s.backend.trainer.named_parameters() if p.requires_grad} == {"emb.weight", "out"}


class _Attention(torch.nn.Module):
    """torch's own attention, as a model built from ``nn.TransformerEncoderLayer`` has it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(256, 16)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = torch.nn.Linear(16, 256)

    def forward(self, idx):
        x = self.emb(idx)
        return self.head(x + self.attn(x, x, x, need_weights=False)[0])


def test_lora_does_not_adapt_the_projection_multihead_attention_reads_directly():
    """nn.MultiheadAttention multiplies by ``out_proj.weight`` itself: the adapter LoRA put on ``out_proj`` was
    trainable, yet never trained (its factors stayed at peft's init through every step)."""
    with lora_session(_Attention(), lora={"rank": 2}) as s:
        trainable = {n: p.detach().clone() for n, p in s.backend.trainer.named_parameters() if p.requires_grad}
        assert trainable and not any("out_proj" in n for n in trainable)
        train(s, steps=2)
        after = dict(s.backend.trainer.named_parameters())
        assert [n for n in trainable if "lora_B" in n and torch.equal(trainable[n], after[n])] == []


def test_a_forward_only_evaluation_runs_without_lora_dropout_and_training_keeps_it():
    """With LoRA dropout, three ``forward_only`` evaluations of the same weights gave three losses (54.97, 56.50,
    59.00): dropout was on. An evaluation now runs the model in eval mode (the same loss each time, that of the
    weights without dropout); training steps keep their dropout and the model its training mode."""
    batch = [samples.cross_entropy(list(b"n=12345 n=678"))]
    with lora_session("tiny", lora={"rank": 4, "dropout": 0.5}, seed=0) as s:
        train(s)  # the adapters move off zero: dropout on them changes the output
        evals = [s.forward_backward(batch, forward_only=True).result().loss for _ in range(3)]
        assert evals[0] == evals[1] == evals[2]
        assert s.backend.trainer.training
        trained = [s.forward_backward(batch).result().loss for _ in range(3)]  # gradients accumulate; not stepped
        assert len(set(trained)) > 1  # dropout still on in training
        assert s.forward_backward(batch, forward_only=True).result().loss == evals[0]  # no step since: the same


def test_a_rank_no_layer_can_use_is_refused_before_peft_allocates_it():
    """``lora={"rank": 10**8}`` asked peft for ~1e11 floats (found reading the code; ``rlnb serve`` caps it with
    ``max_lora_rank``, a local session did not): a rank above every adapted layer's smaller dimension adds weights
    but no capacity. The largest usable rank is still taken."""
    with pytest.raises(ValueError, match=r"lora: rank 100000000 is more than any adapted layer can use .* \[1, 64\]"):
        lora_session("tiny", lora={"rank": 10**8})
    with lora_session("tiny", lora={"rank": 64}) as s:
        train(s, steps=1)
