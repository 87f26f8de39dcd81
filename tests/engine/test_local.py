"""The in-process backend through the public Session API: real torch maths against references."""

import asyncio
import copy
import shutil
import time

import pytest
import torch
from torch import nn

import rlnb
from rlnb import samples, wire
from rlnb.engine.backend import LocalBackend
from rlnb.engine.checkpoints import CheckpointMismatch
from rlnb.engine.models.tiny import TinyConfig, TinyTransformer
from rlnb.engine.optim.muon import ns_dtype_for
from tests.support.bigram import VOCAB, Bigram


def ce_batch(seed: int, n: int = 3, length: int = 6):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, VOCAB, (length,), generator=g).tolist() for _ in range(n)]
    weights = [[0.0] + [1.0, 0.5, 1.0, 2.0, 1.0][: length - 1] for _ in range(n)]
    return seqs, weights


def reference_ce(model, seqs, weights):
    total = 0.0
    for s, w in zip(seqs, weights, strict=True):
        logits = model(torch.tensor(s[:-1]))
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s[1:])[:, None])[:, 0]
        total = total + (-lp * torch.tensor(w[1:])).sum()
    return total


def params_of(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def states_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def local_session(**kw):
    kw.setdefault("device", "cpu")
    return rlnb.connect("local", **kw)


def test_adamw_matches_torch_over_20_steps():
    model = Bigram()
    ref = copy.deepcopy(model)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.05)
    with local_session(optimizer="adam", model=model) as s:
        for i in range(20):
            seqs, weights = ce_batch(i)
            s.forward_backward([samples.cross_entropy(t, w) for t, w in zip(seqs, weights, strict=True)])
            s.optim_step(
                rlnb.AdamParams(
                    learning_rate=1e-2, beta1=0.8, beta2=0.99, eps=1e-7, weight_decay=0.05, grad_clip_norm=0
                )
            )
            opt.zero_grad()
            reference_ce(ref, seqs, weights).backward()
            opt.step()
        s.weights_sync().result()
        assert s.step == 20
        trained = {k: v for k, v in s.backend.trainer.state_dict().items()}
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(trained[k], v, atol=1e-6, rtol=0)


def test_gradients_accumulate_across_forward_backward_calls():
    seqs, weights = ce_batch(7, n=4)
    batch = [samples.cross_entropy(t, w) for t, w in zip(seqs, weights, strict=True)]
    hp = rlnb.AdamParams(learning_rate=1e-2, grad_clip_norm=0)
    with local_session(model=Bigram()) as one, local_session(model=Bigram()) as two:
        l_all = one.forward_backward(batch).result().loss
        one.optim_step(hp).result()
        l_a = two.forward_backward(batch[:2]).result().loss
        l_b = two.forward_backward(batch[2:]).result().loss
        two.optim_step(hp).result()
        assert l_a + l_b == pytest.approx(l_all, rel=1e-6)
        a, b = one.backend.trainer.state_dict(), two.backend.trainer.state_dict()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0)


class Dropped(Bigram):
    """Bigram with a dropout layer of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, idx):
        return self.head(self.drop(torch.tanh(self.hidden(self.emb(idx)))))


def test_a_plain_modules_own_dropout_is_kept_on_the_global_rng():
    """The documented rule (models.md): a Hugging Face model's dropout is turned off, a plain module's is its own and
    draws from torch's global RNG, so its losses repeat where that RNG is seeded alike, one session at a time."""
    seqs, weights = ce_batch(3)
    batch = [samples.cross_entropy(t, w) for t, w in zip(seqs, weights, strict=True)]
    with local_session(model=Dropped()) as s, torch.random.fork_rng(devices=[]):
        assert s.backend.trainer.drop.p == 0.5
        losses = []
        for seed in (7, 7, 8):
            torch.manual_seed(seed)
            losses.append(s.forward_backward(batch).result().loss)
    assert losses[0] == losses[1] != losses[2]


def test_cross_entropy_loss_is_the_weighted_sum_and_outputs_mask_excluded_positions():
    model = Bigram()
    seqs, weights = ce_batch(3)
    weights[0][2] = 0.0  # one excluded position
    expected = reference_ce(copy.deepcopy(model), seqs, weights).item()
    with local_session(model=model) as s:
        batch = [samples.cross_entropy(t, w) for t, w in zip(seqs, weights, strict=True)]
        out = s.forward_backward(batch, return_loss_fn_outputs=True).result()
    assert out.loss == pytest.approx(expected, rel=1e-6)
    lp0 = out.loss_fn_outputs[0].tensors["logprobs"].data
    assert len(lp0) == len(seqs[0]) - 1 and lp0[1] == 0.0 and all(v < 0 for i, v in enumerate(lp0) if i != 1)


def test_forward_only_accumulates_nothing():
    seqs, weights = ce_batch(1)
    with local_session(model=Bigram()) as s:
        before = params_of(s.backend.trainer)
        fb = s.forward_backward([samples.cross_entropy(seqs[0], weights[0])], forward_only=True).result()
        s.optim_step(rlnb.AdamParams(learning_rate=1.0, weight_decay=0)).result()
        assert fb.loss > 0
        assert states_equal(before, params_of(s.backend.trainer))


def test_non_finite_gradient_fails_and_leaves_params_and_optimizer_state_bit_identical():
    model = Bigram()
    seqs, weights = ce_batch(5)
    batch = [samples.cross_entropy(t, w) for t, w in zip(seqs, weights, strict=True)]
    with local_session(model=model) as s:
        for _ in range(3):
            s.forward_backward(batch)
            s.optim_step(rlnb.AdamParams(learning_rate=1e-2)).result()
        s.backend.wait_idle()
        before_params = params_of(s.backend.trainer)
        before_state = copy.deepcopy(s.backend.optim.state_dict())
        model.poison = True
        fb = s.forward_backward(batch)
        step = s.optim_step(rlnb.AdamParams(learning_rate=1e-2))
        with pytest.raises(rlnb.OperationFailed) as info:
            step.result(timeout=30)
        assert fb.result().loss > 0  # the loss itself was finite
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
        # it names the weights whose gradient is not finite, and says the gradients are gone (it said neither)
        said = "gradient norm is nan; non-finite gradients in: hidden.weight; parameters and optimizer state unchanged"
        assert info.value.message.startswith(said) and "the accumulated gradients dropped" in info.value.message
        assert step.status == "TRAINING_OPERATION_STATUS_FAILED"
        assert states_equal(before_params, params_of(s.backend.trainer))
        after_state = s.backend.optim.state_dict()
        flat = lambda sd: {  # noqa: E731
            f"{g}/{k}": v for g, st in sd.items() if isinstance(st, dict) for k, v in _tensors(st)
        }
        assert states_equal(flat(before_state), flat(after_state))
        assert s.step == 3
        model.poison = False
        s.forward_backward(batch)
        assert s.optim_step().result().step == 4  # the bad gradients were dropped; training goes on
        df = s.history.df
        failed = df[df.status == "TRAINING_OPERATION_STATUS_FAILED"]
        assert list(failed.kind) == ["optim-step"]
        assert list(failed.error_code) == ["TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"]


def _tensors(state, prefix=""):
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            yield prefix + str(k), v
        elif isinstance(v, dict):
            yield from _tensors(v, f"{prefix}{k}/")
        elif isinstance(v, list | tuple):
            yield from _tensors(dict(enumerate(v)), f"{prefix}{k}/")


def test_non_finite_loss_fails_forward_backward():
    model = Bigram()
    with torch.no_grad():
        model.head.weight[0, 0] = float("nan")
    with local_session(model=model) as s:
        op = s.forward_backward([samples.cross_entropy([1, 2, 3])])
        with pytest.raises(rlnb.OperationFailed) as info:
            op.result()
    assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
    assert "NaN" in info.value.message or "nan" in info.value.message


def test_sampling_uses_the_published_weights_only():
    prompt = list(b"ab")
    with local_session(model="tiny", seed=1) as s:
        first = s.sample([prompt], num_samples=2, max_tokens=6, seed=7).result().results[0]
        assert first.policy_segments[0].version == 0
        for _ in range(2):
            s.forward_backward([samples.cross_entropy(list(b"ab999999"))])
            s.optim_step(rlnb.AdamParams(learning_rate=0.05)).result()
        stale = s.sample([prompt], num_samples=2, max_tokens=6, seed=7).result().results[0]
        assert [q.tokens for q in stale.sequences] == [q.tokens for q in first.sequences]
        assert [q.logprobs for q in stale.sequences] == [q.logprobs for q in first.sequences]
        assert s.weights_sync().result().weights_version == 2
        fresh = s.sample([prompt], num_samples=2, max_tokens=6, seed=7).result().results[0]
        assert fresh.policy_segments[0].version == 2
        assert [q.logprobs for q in fresh.sequences] != [q.logprobs for q in first.sequences]
        assert s.info().policy_state.applied_weights_version == 2


class Normed(nn.Module):
    """A user model with running statistics, as a BatchNorm keeps them: every training forward moves them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB)
        self.register_buffer("running_mean", torch.zeros(VOCAB))

    def forward(self, idx):
        logits = self.head(self.emb(idx))
        if self.training:
            self.running_mean.mul_(0.5).add_(0.5 * logits.detach().reshape(-1, VOCAB).mean(0))
        return logits - self.running_mean


def test_running_statistics_reach_the_sampler_only_through_weights_sync():
    """The sampler shared every buffer with the trainer: a forward-backward's new running statistics changed what
    sampling returned before any weights-sync."""
    with local_session(model=Normed()) as s:

        def logprobs():
            return s.sample([[1, 2, 3]], num_samples=2, max_tokens=4, seed=3).result().results[0].sequences[0].logprobs

        first = logprobs()
        s.forward_backward([samples.cross_entropy([4, 5, 6, 7, 8, 9])]).result()
        assert logprobs() == first
        s.weights_sync().result()
        assert logprobs() != first  # the statistics are published with the weights
        assert torch.equal(s.backend.sampler.running_mean, s.backend.trainer.running_mean)


def test_seed_determinism():
    def run(model_seed, sample_seed):
        with local_session(model="tiny", seed=model_seed) as s:
            out = s.sample([list(b"x=")], num_samples=3, max_tokens=5, seed=sample_seed).result()
        return [q.tokens for q in out.results[0].sequences]

    assert run(0, 5) == run(0, 5)
    assert run(0, 5) != run(0, 6)
    assert run(0, 5) != run(1, 5)
    with local_session(model="tiny", seed=3) as a, local_session(model="tiny", seed=3) as b:
        # Unseeded sampling is reproducible from the session seed.
        ta = a.sample([list(b"q")], max_tokens=5).result().results[0].sequences[0].tokens
        tb = b.sample([list(b"q")], max_tokens=5).result().results[0].sequences[0].tokens
    assert ta == tb


class Letters:
    """A stand-in tokenizer: token t reads as one capital letter."""

    eos_token_id = None

    def encode(self, text):
        return [ord(c) - 65 for c in text]

    def decode(self, tokens, skip_special_tokens=False):
        return "".join(chr(65 + t % 26) for t in tokens)


def test_sampling_params():
    letters = Letters().decode
    with local_session(model="tiny", seed=2, tokenizer=Letters()) as s:
        greedy = s.sample([list(b"hi")], num_samples=2, max_tokens=5, temperature=0).result().results[0]
        top1 = s.sample([list(b"hi")], num_samples=2, max_tokens=5, top_k=1, seed=1).result().results[0]
        assert greedy.sequences[0].tokens == greedy.sequences[1].tokens == top1.sequences[0].tokens
        assert all(q.stop_reason == "STOP_REASON_LENGTH" and len(q.tokens) == 5 for q in greedy.sequences)
        tiny_p = s.sample([list(b"hi")], max_tokens=5, top_p=1e-6, seed=3).result().results[0]
        assert tiny_p.sequences[0].tokens == greedy.sequences[0].tokens
        first_char = letters([greedy.sequences[0].tokens[1]])
        stopped = s.sample([list(b"hi")], max_tokens=5, temperature=0, stop=[first_char]).result().results[0]
        assert stopped.sequences[0].stop_reason == "STOP_REASON_STOP"
        assert len(stopped.sequences[0].tokens) <= 2
        pl = s.sample([list(b"hello")], max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=3).result()
        r = pl.results[0]
        assert len(r.prompt_logprobs) == 5 and r.prompt_logprobs[0] == 0.0 and all(v < 0 for v in r.prompt_logprobs[1:])
        assert r.topk_prompt_logprobs[0].token_ids == [] and len(r.topk_prompt_logprobs[1].token_ids) == 3
        assert r.topk_prompt_logprobs[1].logprobs == sorted(r.topk_prompt_logprobs[1].logprobs, reverse=True)


def test_trainer_only_session_rejects_sample():
    with local_session(model="tiny", num_generator_replicas=0) as s, pytest.raises(rlnb.OperationFailed) as info:
        s.sample([[1, 2]]).result()
    assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT" and "trainer-only" in info.value.message


def test_checkpoint_resume_gives_the_same_next_step(tmp_path):
    batches = [[samples.cross_entropy(t) for t in ce_batch(i)[0]] for i in range(5)]
    hp = rlnb.AdamParams(learning_rate=1e-2)
    with local_session(model=Bigram(), checkpoint_dir=tmp_path) as s:
        for b in batches[:3]:
            s.forward_backward(b)
            s.optim_step(hp)
        ckpt = s.save_training_checkpoint().result().checkpoint
        for b in batches[3:]:
            s.forward_backward(b)
            s.optim_step(hp)
        s.weights_sync().result()
        never_stopped = params_of(s.backend.trainer)
        path = s.backend.checkpoint_path(ckpt.id)
        assert [c.id for c in s.info().training_checkpoints] == [ckpt.id]
    assert ckpt.step == 3 and path.exists()

    with local_session(model=Bigram(), resume_from=path) as r:
        assert r.step == 3
        for b in batches[3:]:
            r.forward_backward(b)
            r.optim_step(hp)
        assert r.weights_sync().result().weights_version == 5
        assert states_equal(never_stopped, params_of(r.backend.trainer))

    with local_session(model=Bigram(), resume_from=path, load_optimizer=False) as cold:
        assert cold.step == 0
        for b in batches[3:]:
            cold.forward_backward(b)
            cold.optim_step(hp)
        cold.weights_sync().result()
        assert not states_equal(never_stopped, params_of(cold.backend.trainer))


def test_a_download_variant_names_a_folder_of_the_checkpoint_never_one_outside_it(tmp_path):
    """``checkpoint_files(id, "../..")`` listed every file two folders above the checkpoint (the checkpoint folder's
    parent and beyond: other sessions' checkpoints, the user's files) as the checkpoint's download."""
    (tmp_path / "secret.txt").write_text("not a checkpoint's")
    with local_session(model="tiny", checkpoint_dir=tmp_path / "ckpts") as s:
        ckpt = s.save_inference_checkpoint().result().checkpoint
        assert all(f.is_relative_to(tmp_path / "ckpts") for f in s.backend.checkpoint_files(ckpt.id))
        for variant in ("../..", "..", "merged/..", "MERGED", ""):
            with pytest.raises(ValueError, match=r"^variant must be one of \['merged', 'adapter'\], got "):
                s.backend.checkpoint_files(ckpt.id, variant)


def test_a_checkpoint_whose_files_were_deleted_is_said_to_be_gone_not_to_lack_a_variant(tmp_path):
    """A training checkpoint's ``.pt`` or an inference checkpoint's folder deleted by hand: ``checkpoint_files`` said
    the checkpoint "has no merged variant (the adapter exists only for LoRA sessions)"."""
    with local_session(model="tiny", checkpoint_dir=tmp_path / "ckpts") as s:
        train, infer = s.save_training_checkpoint().result(), s.save_inference_checkpoint().result()
        with pytest.raises(ValueError, match="has no adapter variant"):
            s.backend.checkpoint_files(infer.checkpoint.id, "adapter")  # a full-weight session's: it never had one
        s.backend.checkpoint_path(train.checkpoint.id).unlink()
        shutil.rmtree(s.backend.checkpoint_path(infer.checkpoint.id) / "merged")
        for ckpt in (train.checkpoint, infer.checkpoint):
            with pytest.raises(FileNotFoundError, match=rf"^checkpoint {ckpt.id}'s files are gone from .*ckpts$"):
                s.backend.checkpoint_files(ckpt.id)


def test_a_discarded_checkpoint_is_listed_no_more_and_an_unknown_one_is_named(tmp_path):
    """A checkpoint deleted with ``discard_checkpoint`` (as Find LR deletes its copy) stayed in the session's info, its
    file gone; discarding an id the session never made was a bare ``KeyError: 'x'``."""
    with local_session(model="tiny", checkpoint_dir=tmp_path / "ckpts") as s:
        kept, gone = (s.save_training_checkpoint().result().checkpoint for _ in range(2))
        infer = s.save_inference_checkpoint().result().checkpoint
        s.backend.discard_checkpoint(gone.id)
        s.backend.discard_checkpoint(infer.id)
        info = s.info()
        assert [c.id for c in info.training_checkpoints] == [kept.id] and info.inference_checkpoints == []
        assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == [f"{kept.id}.pt"]
        with pytest.raises(KeyError, match=f"no checkpoint '{gone.id}' in this session"):
            s.backend.discard_checkpoint(gone.id)


@pytest.mark.parametrize("lora", [None, pytest.param({"rank": 2}, marks=pytest.mark.slow)])  # LoRA: peft
def test_a_checkpoint_saved_between_forward_backward_and_optim_step_keeps_the_gradients(tmp_path, lora):
    """The accumulated gradients were not saved: the resumed session's next optim-step stepped on none
    (grad_norm 0.0, and weight decay alone moved the weights) where the session that went on stepped on them."""
    batch = [samples.cross_entropy(t) for t in ce_batch(0)[0]]
    hp = rlnb.AdamParams(learning_rate=1e-2, weight_decay=0.1)
    with local_session(model="tiny", lora=lora, checkpoint_dir=tmp_path) as s:
        s.forward_backward(batch)
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
        went_on = s.optim_step(hp).result()
        never_stopped = params_of(s.backend.trainer)
    with local_session(model="tiny", lora=lora, resume_from=path) as r:
        resumed = r.optim_step(hp).result()
        assert resumed.metrics["grad_norm"] == went_on.metrics["grad_norm"] > 0
        assert states_equal(never_stopped, params_of(r.backend.trainer))
    with local_session(model="tiny", lora=lora, resume_from=path, load_optimizer=False) as fresh:
        assert all(p.grad is None for p in fresh.backend.trainer.parameters())  # a fresh run: weights alone
    state = torch.load(path, weights_only=True)
    name = next(iter(state["grads"]))
    state["grads"][name] = torch.zeros(3)  # tampered: a gradient no weight of the model has the shape of
    torch.save(state, tmp_path / "tampered.pt")
    with pytest.raises(ValueError, match=rf"its gradient '{name}' \(for the next optim-step\) fits no trainable"):
        local_session(model="tiny", lora=lora, resume_from=tmp_path / "tampered.pt")


def test_unseeded_samples_go_on_after_a_resume_rather_than_repeat_the_runs_first_ones(tmp_path):
    """The sampling generator was seeded afresh at resume: a resumed run's unseeded samples repeated, draw for draw,
    the ones its run began with (the same completions again), not the ones the saved session drew next."""

    def draw(session):
        return [q.tokens for q in session.sample([[1, 2]], num_samples=4, max_tokens=6).result().results[0].sequences]

    with local_session(model="tiny", checkpoint_dir=tmp_path) as s:
        first = draw(s)
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
        went_on = draw(s)
    assert went_on != first
    with local_session(model="tiny", resume_from=path) as r:
        assert draw(r) == went_on
    with local_session(model="tiny", resume_from=path, sampling_seed=0) as seeded:  # a seed given now is the one
        assert draw(seeded) == first
    state = torch.load(path, weights_only=True)
    state["sample_rng"] = torch.zeros(3)
    torch.save(state, tmp_path / "tampered.pt")
    with pytest.raises(ValueError, match=r"tampered.pt' is not a usable rlnb checkpoint: its sample_rng is no gen"):
        local_session(model="tiny", resume_from=tmp_path / "tampered.pt")


def test_a_resumed_sessions_checkpoint_id_is_the_checkpoints_name_dots_and_all(tmp_path):
    """A checkpoint folder renamed ``best.v2`` (or a file ``run.step5.pt``): the session's
    ``resume_from_checkpoint_id``, which the run config records, said ``best`` (``Path.stem``)."""
    with local_session(model="tiny", checkpoint_dir=tmp_path) as s:
        infer = s.backend.checkpoint_path(s.save_inference_checkpoint().result().checkpoint.id)
        train = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
    for path, name in ((infer.rename(tmp_path / "best.v2"), "best.v2"), (train.rename(tmp_path / "run.step5.pt"),
                                                                         "run.step5")):  # fmt: skip
        with local_session(model="tiny", resume_from=path) as r:
            assert r.info().resume_from_checkpoint_id == name


def test_only_a_continued_run_takes_its_checkpoints_newton_schulz_dtype(tmp_path):
    """A checkpoint's ``ns_dtype`` is its run's: resumed with ``load_optimizer=False`` (weights only, a fresh run) it
    was adopted all the same, so an Adam checkpoint from a GPU gave a CPU Muon run bfloat16 Newton-Schulz."""
    own = ns_dtype_for(torch.device("cpu"))  # bfloat16 where the CPU has bf16 matmul units, else float32
    other = torch.float32 if own == torch.bfloat16 else torch.bfloat16
    with local_session(model="tiny", optimizer="muon", ns_dtype=other, checkpoint_dir=tmp_path) as s:
        s.forward_backward([samples.cross_entropy(list(b"newton"))])
        s.optim_step(rlnb.MuonParams(learning_rate=0.01))
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
    with local_session(model="tiny", optimizer="muon", resume_from=path) as continued:
        assert continued.backend.optim.ns_dtype == other and continued.step == 1
    with local_session(model="tiny", optimizer="muon", resume_from=path, load_optimizer=False) as fresh:
        assert fresh.backend.optim.ns_dtype == own and fresh.step == 0  # this device's own


def test_a_resume_from_that_is_not_a_checkpoint_names_the_path_and_what_was_expected(tmp_path):
    garbage, empty, a_list, folder = (tmp_path / name for name in ("garbage.pt", "empty.pt", "list.pt", "d"))
    garbage.write_bytes(b"not a torch file\n" * 10)
    empty.touch()
    torch.save([1, 2], a_list)
    folder.mkdir()
    expected = r"expected a training checkpoint \(<id>\.pt\) or an inference checkpoint folder"
    for path, problem in (
        (garbage, r"is not an rlnb checkpoint \(torch\.load: UnpicklingError\)"),
        (empty, r"is not an rlnb checkpoint \(torch\.load: EOFError\)"),
        (folder, r"is a folder but not an rlnb inference checkpoint \(rlnb\.json: FileNotFoundError\)"),
        (tmp_path / "missing.pt", "does not exist"),
    ):
        with pytest.raises(ValueError, match=rf"^resume_from '{path}' {problem}.*{expected}"):
            local_session(resume_from=path)
    with pytest.raises(ValueError, match=rf"^resume_from '{a_list}' is a torch file but not an rlnb training"):
        local_session(resume_from=a_list)


@pytest.mark.slow  # LoRA: peft
def test_a_resume_takes_the_lora_settings_it_leaves_out_from_its_checkpoint(tmp_path):
    """``lora=True`` (or ``{"rank": 4}`` alone, as Together's Tinker shim resumes) took the defaults for the rest, and
    the checkpoint of a run made with alpha 8 or train_unembed false was refused; a setting given is still checked."""
    made = {"rank": 4, "alpha": 8, "dropout": 0.25, "train_unembed": False}
    with local_session(model="tiny", lora=made, checkpoint_dir=tmp_path) as s:
        s.forward_backward([samples.cross_entropy(list(b"lora"))])
        s.optim_step(rlnb.AdamParams(learning_rate=0.01))
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
        weights = params_of(s.backend.trainer)
    for given in (True, {"rank": 4}):
        with local_session(model="tiny", lora=given, resume_from=path) as r:
            config = r.info().lora_config
            assert {k: getattr(config, k) for k in made} == made and r.step == 1
            assert states_equal(params_of(r.backend.trainer), weights)
    with pytest.raises(CheckpointMismatch, match="checkpoint's LoRA alpha is 8, this session's is 16"):
        local_session(model="tiny", lora={"alpha": 16}, resume_from=path)


def test_a_training_checkpoint_cut_short_is_said_to_be_damaged_at_any_length(tmp_path):
    """A ``.pt`` copied in part read "is not an rlnb checkpoint (torch.load: OSError): [Errno 22] Invalid argument" at
    some lengths: the file was one, cut short, and the message now says so whatever torch's error."""
    with local_session(model="tiny", checkpoint_dir=tmp_path / "ckpt") as s:
        s.forward_backward([samples.cross_entropy(list(b"cut"))])
        s.optim_step(rlnb.AdamParams(learning_rate=0.01))
        whole = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id).read_bytes()
    cut = tmp_path / "cut.pt"
    for length in sorted({8, 100, len(whole) // 3, len(whole) // 2, len(whole) - 100, len(whole) - 1}):
        cut.write_bytes(whole[:length])
        with pytest.raises(ValueError, match=rf"^resume_from '{cut}' is not a usable rlnb checkpoint: it is a torch "
                                             r"file, damaged or cut short \(torch\.load: "):  # fmt: skip
            local_session(resume_from=cut)


def test_inference_checkpoint_is_a_model_transformers_loads(tmp_path, transformers):
    """The built-in model's inference checkpoint is a GPT-2 checkpoint with the same logits."""
    with local_session(model="tiny", checkpoint_dir=tmp_path) as s:
        s.forward_backward([samples.cross_entropy(list(b"hello"))])
        s.optim_step(rlnb.AdamParams(learning_rate=0.01))
        ckpt = s.save_inference_checkpoint().result().checkpoint
        folder = s.backend.checkpoint_path(ckpt.id)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(folder / "merged").eval()
        ids = torch.tensor([list(b"some bytes")])
        with torch.no_grad():
            torch.testing.assert_close(loaded(ids).logits, s.backend.trainer(ids), atol=1e-5, rtol=0)
        with pytest.raises(ValueError, match="load_optimizer"):
            LocalBackend(model="tiny", resume_from=folder, load_optimizer=True)
        resumed = LocalBackend(model="tiny", resume_from=folder, seed=5)
        assert states_equal(params_of(resumed.trainer), params_of(s.backend.trainer))
        resumed.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_statuses_are_observed_in_order_and_submission_never_waits():
    seen: dict[int, list[str]] = {}
    with local_session(model="tiny", op_delay=0.5) as s:
        s.history.on_record(lambda rec: seen.setdefault(rec.seq, []).append(rec.status))
        fb = s.forward_backward([samples.cross_entropy(list(b"abcdef"))])
        opt = s.optim_step()
        assert not opt.done()  # both were submitted within the second the two take to run
        assert opt.result().step == 1 and fb.done()
    for statuses in seen.values():
        assert statuses == [
            "TRAINING_OPERATION_STATUS_PENDING",
            "TRAINING_OPERATION_STATUS_RUNNING",
            "TRAINING_OPERATION_STATUS_COMPLETED",
        ]
    df = s.history.df
    assert list(df.kind) == ["forward-backward", "optim-step"]
    assert (df.submitted_at <= df.started_at).all() and (df.started_at < df.finished_at).all()
    assert df.finished_at[0] <= df.started_at[1]  # strictly in submission order


def test_operations_are_awaitable():
    async def go(s):
        fb = s.forward_backward([samples.cross_entropy(list(b"abc"))])
        return await fb

    with local_session(model="tiny") as s:
        assert asyncio.run(go(s)).loss > 0


def test_close_fails_what_has_not_run():
    s = local_session(model="tiny", op_delay=0.2)
    ops = [s.forward_backward([samples.cross_entropy(list(b"abc"))]) for _ in range(4)]
    deadline = time.monotonic() + 10
    while ops[0].status != "TRAINING_OPERATION_STATUS_RUNNING" and time.monotonic() < deadline:
        time.sleep(0.005)
    s.close()  # the running op finishes; the queued ones never run
    codes = [op.error.code if op.error else None for op in ops]
    assert codes == [None] + ["TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"] * 3
    assert s.info().status == "TRAINING_SESSION_STATUS_STOPPED"
    with pytest.raises(rlnb.SessionClosed):
        s.optim_step()


def test_a_stop_ends_the_simulated_delay_and_the_running_operation_still_finishes():
    """``op_delay=3600``: ``close()`` waited out the hour. The stop ends the delay; the operation's work still runs."""
    s = local_session(model="tiny", op_delay=3600)
    op = s.forward_backward([samples.cross_entropy(list(b"abc"))])
    deadline = time.monotonic() + 30
    while op.status != wire.OperationStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.005)
    started = time.monotonic()
    s.close()
    assert time.monotonic() - started < 60  # the whole hour before
    assert op.status == wire.OperationStatus.COMPLETED and op.result().loss > 0


def test_muon_session_splits_params_and_updates_both_groups():
    with local_session(optimizer="muon", model="tiny") as s:
        split = s.backend.optim.split
        muon_names = {n for n, _ in split.muon}
        adam_names = {n for n, _ in split.adam}
        assert any("attn" in n for n in muon_names) and "lm_head.weight" in adam_names
        assert not muon_names & adam_names
        before = params_of(s.backend.trainer)
        s.forward_backward([samples.cross_entropy(list(b"hello world"))])
        out = s.optim_step(rlnb.MuonParams(learning_rate=0.02, adam={"learning_rate": 1e-3})).result()
        after = params_of(s.backend.trainer)
        assert out.metrics["grad_norm/muon"] > 0 and out.metrics["grad_norm/adam"] > 0
        changed = {k for k in before if not torch.equal(before[k], after[k])}
        assert changed & muon_names and changed & adam_names
        with pytest.raises(TypeError, match="optimizer is muon"):
            s.optim_step(rlnb.AdamParams())


def test_other_kind_params_fail_invalid_input_on_the_backend():
    with local_session(optimizer="muon", model="tiny") as s:
        got = []
        s.backend.submit("optim-step", wire.OptimStepBody(adam_params=wire.AdamParams()), got.append)
        s.backend.wait_idle()
    assert got[-1].status == "TRAINING_OPERATION_STATUS_FAILED"
    assert (
        got[-1].error.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT" and "muon_params" in got[-1].error.message
    )


@pytest.mark.parametrize(
    "loss,match",
    [(wire.LossConfig(type="LOSS_TYPE_DRO"), "beta"), (wire.LossConfig(type="LOSS_TYPE_UNSPECIFIED"), "loss.type")],
)
def test_a_loss_the_session_refuses_fails_invalid_input_on_the_backend(loss, match):
    """The engine's own check, for a body that reaches the backend without the session's (``wire.loss_problem``)."""
    body = wire.ForwardBackwardBody.model_construct(samples=[samples.policy([1], [2, 3], [-1.0, -1.0], 1.0)], loss=loss)
    with local_session(model="tiny") as s:
        got = []
        s.backend.submit("forward-backward", body, got.append)
        s.backend.wait_idle()
    assert got[-1].error.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT" and match in got[-1].error.message


@pytest.mark.parametrize(
    "sample,loss,match",
    [
        (samples.cross_entropy([1, 2, 300]), "cross_entropy", "target_tokens"),
        (wire.Sample(model_input=wire.ModelInput.from_tokens([]), loss_fn_inputs={}), "cross_entropy", "no tokens"),
        (samples.cross_entropy([1, 2, 3]), "grpo", "logprobs"),
    ],
)
def test_bad_inputs_fail_invalid_input(sample, loss, match):
    with local_session(model="tiny") as s:
        op = s.forward_backward([sample], loss)
        with pytest.raises(rlnb.OperationFailed, match=match) as info:
            op.result()
    assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"


def test_loss_config_errors_before_sending():
    with local_session(model="tiny") as s:
        with pytest.raises(ValueError, match=r"loss.dro_params is required for LOSS_TYPE_DRO \(beta: no default\)"):
            s.forward_backward([samples.cross_entropy([1, 2])], "dro")
        with pytest.raises(ValueError, match="loss must be one of"):
            s.forward_backward([samples.cross_entropy([1, 2])], "mse")
        with pytest.raises(ValueError, match=r"grpo params have no field 'betta'; its fields: clip_low.*, beta"):
            s.forward_backward([samples.cross_entropy([1, 2])], "grpo", {"betta": 0.1})  # was sent, refused later
        assert len(s.history) == 0


@pytest.mark.parametrize(
    "samples_, loss, params, match",
    [  # each was sent: it failed INVALID_INPUT once it ran (a remote one: a 400), or the params were dropped
        ([], "cross_entropy", None, "samples is empty"),
        (None, {"type": "LOSS_TYPE_UNSPECIFIED"}, None, "loss.type must be one of LOSS_TYPE_CROSS_ENTROPY, "),
        (None, wire.LossConfig(type="LOSS_TYPE_UNSPECIFIED"), None, "got LOSS_TYPE_UNSPECIFIED"),
        (None, {"type": "LOSS_TYPE_DRO"}, None, "loss.dro_params is required for LOSS_TYPE_DRO"),
        (None, {"type": "LOSS_TYPE_GRPO", "ppo_params": {}}, None, "loss.ppo_params does not apply to LOSS_TYPE_GRPO"),
        (None, wire.LossConfig(type="LOSS_TYPE_GRPO"), {"beta": 0.5}, "loss_params go with a loss name"),
        (None, {"type": "LOSS_TYPE_GRPO"}, {"beta": 0.5}, "a LossConfig or dict carries its own params"),
    ],
)
def test_a_loss_config_or_batch_the_session_cannot_run_is_refused_before_sending(samples_, loss, params, match):
    batch = [samples.cross_entropy([1, 2])] if samples_ is None else samples_
    with local_session(model="tiny") as s:
        with pytest.raises(ValueError, match=match):
            s.forward_backward(batch, loss, params)
        assert len(s.history) == 0
        # the same config, well formed, goes through
        s.forward_backward([samples.cross_entropy([1, 2])], {"type": "LOSS_TYPE_CROSS_ENTROPY"}).result(60)


def test_every_loss_runs_through_the_backend():
    sample = samples.policy(list(b"ab"), list(b"cd"), [-2.0, -3.0], 0.5, reference_logprobs=[-2.1, -2.9])
    with local_session(model="tiny") as s:
        for loss, params in [
            ("grpo", {"beta": 0.1}),
            ("importance_sampling", None),
            ("ppo", None),
            ("cispo", None),
            ("dro", {"beta": 0.1}),
            ("dppo", None),
        ]:
            out = s.forward_backward([sample], loss, params).result()
            assert out.loss == out.loss and out.metrics["loss/tokens"] == 2.0, loss


def test_custom_forward_backward_backpropagates_the_given_gradients():
    model = Bigram()
    seq = [3, 4, 5, 6]
    grads = [0.5, -1.0, 2.0]
    ref = copy.deepcopy(model)
    lp = torch.log_softmax(ref(torch.tensor(seq[:-1])), -1).gather(-1, torch.tensor(seq[1:])[:, None])[:, 0]
    (lp * torch.tensor(grads)).sum().backward()
    with local_session(model=model) as s:
        body = wire.CustomForwardBackwardBody(
            samples=[samples.cross_entropy(seq)], gradients=[wire.GradientTensor(data=grads, dtype="D_TYPE_FLOAT32")]
        )
        got = []
        s.backend.submit("custom-forward-backward", body, got.append)
        s.backend.wait_idle()
        assert got[-1].status == "TRAINING_OPERATION_STATUS_COMPLETED"
        torch.testing.assert_close(model.hidden.weight.grad, ref.hidden.weight.grad)


def test_custom_forward_backward_weights_multiply_each_tokens_gradient():
    """Fractional ``weights`` acted as a 0/1 mask (any non-zero weight counted 1), which the API does not say: a
    weight multiplies its token's loss, as cross-entropy's does, so d(Σ w·ℓ)/d lp = w·g. Against a hand-computed
    reference, and against the built-in cross-entropy of the same weights (its loss is ℓ = -lp: g = -1)."""
    seq, grads, weights = [3, 4, 5, 6], [0.5, -1.0, 2.0], [0.0, 0.25, 0.0, 3.0]  # weights[0] is never predicted
    model = Bigram()
    ref = copy.deepcopy(model)
    lp = torch.log_softmax(ref(torch.tensor(seq[:-1])), -1).gather(-1, torch.tensor(seq[1:])[:, None])[:, 0]
    (lp * torch.tensor(grads) * torch.tensor(weights[1:])).sum().backward()  # 0.25·0.5, 0·(-1), 3·2 per token
    with local_session(model=model) as s:
        for g in (grads, [-1.0] * 3):
            body = wire.CustomForwardBackwardBody(
                samples=[samples.cross_entropy(seq, weights)], gradients=[wire.GradientTensor(data=g)]
            )
            got: list[wire.Operation] = []
            s.backend.submit("custom-forward-backward", body, got.append)
            assert s.backend.wait_idle(60)
            assert got[-1].status == "TRAINING_OPERATION_STATUS_COMPLETED", got[-1]
            if g is grads:
                torch.testing.assert_close(model.hidden.weight.grad, ref.hidden.weight.grad)
                model.zero_grad()
        custom = model.hidden.weight.grad.clone()
        model.zero_grad()
        s.forward_backward([samples.cross_entropy(seq, weights)]).result(timeout=60)
        torch.testing.assert_close(model.hidden.weight.grad, custom)


def test_user_module_with_batched_input_and_tiny_transformer_config():
    model = TinyTransformer(TinyConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16))
    with local_session(model=model) as s:
        assert s.backend.vocab_size == 50 and s.backend.context_length == 16
        assert s.forward_backward([samples.cross_entropy([1, 2, 3, 49])]).result().loss > 0
        with pytest.raises(ValueError, match="samples\\[0\\] has 19 tokens, more than the model's context of 16"):
            s.forward_backward([samples.cross_entropy(list(range(20)))])
        assert len(s.history) == 1  # refused before it was submitted


def test_sample_limits_fail_invalid_input_not_internal_error():
    with local_session(model="tiny") as s:
        for n in (10_000, 257, 0, -3):  # one range both ways (review42d: 0 got the wire's 1..2147483647)
            with pytest.raises(
                ValueError, match=rf"num_samples must be in \[1, 256\] on this in-process session, got {n}$"
            ):
                s.sample([[1, 2]], num_samples=n)  # refused before it is sent (adv5a: it was sent, then FAILED)
        assert len(s.history) == 0
        body = wire.SampleBody(model_inputs=[wire.ModelInput.from_tokens([1, 2])], num_samples=10_000)
        with pytest.raises(
            rlnb.OperationFailed, match=r"num_samples must be an integer in \[1, 256\], got 10000"
        ) as info:
            s._submit(wire.OperationKind.SAMPLE, body).result()  # a body that skipped Session's check
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
        cold = s.sample([[1, 2]], max_tokens=4, temperature=1e-300).result().results[0].sequences[0]
        greedy = s.sample([[1, 2]], max_tokens=4, temperature=0).result().results[0].sequences[0]
        assert cold.tokens == greedy.tokens


def test_a_refused_submission_does_not_shift_step_numbers():
    with local_session(model="tiny") as s:
        submit = s.backend.submit

        def refuse_optim(kind, body, listener):
            if kind == "optim-step":
                raise rlnb.SessionClosed("refused before it was queued")
            submit(kind, body, listener)

        s.backend.submit = refuse_optim
        with pytest.raises(rlnb.SessionClosed):
            s.optim_step()
        s.backend.submit = submit
        s.forward_backward([samples.cross_entropy(list(b"abc"))])
        assert s.optim_step().result().step == 1
        assert list(s.history.df.step) == [0, 0, 1]  # the refused op, then the fb it would have followed
        assert s.id == s.info().id


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_params_changed_after_a_submission_leave_the_queued_step_as_submitted(optimizer):
    """``p.learning_rate = lr`` in a loop (params validate assignments, so they are meant to change): the steps
    still queued behind the worker took the last rate (all three stepped at 3e-3), while the history recorded
    1e-3, 2e-3 and 3e-3. Each step now takes its params as they were when it was submitted."""
    params = rlnb.AdamParams() if optimizer == "adam" else rlnb.MuonParams(adam={})
    lrs = [1e-3, 2e-3, 3e-3]
    with local_session(model="tiny", optimizer=optimizer, seed=0, op_delay=0.05) as s:
        steps = []
        for lr in lrs:  # submissions return at once; the worker runs each operation 0.05 s later
            params.learning_rate = lr
            if optimizer == "muon":
                params.adam.learning_rate = lr / 10
            s.forward_backward([samples.cross_entropy(list(b"queued"))])
            steps.append(s.optim_step(params))
        metrics = [op.result(60).metrics for op in steps]
        recorded = list(s.history.df[s.history.df.kind == "optim-step"].params)
    assert [m["learning_rate"] for m in metrics] == lrs
    assert [r["learning_rate"] for r in recorded] == lrs
    if optimizer == "muon":
        assert [m["adam/learning_rate"] for m in metrics] == [lr / 10 for lr in lrs]


def test_optimizer_params_are_validated_once_per_step(monkeypatch):
    """The params a user builds are checked when built, and once more when the session takes its copy (params made
    by ``model_construct`` skipped the first); the body, the backend and the optimizer take them as they are: not
    one validation per layer."""
    from rlnb import params as params_mod

    counts: dict[str, int] = {}

    class Counting:
        def __init__(self, name: str, inner):
            self.name, self.inner = name, inner

        def validate_python(self, *args, **kwargs):
            counts[self.name] = counts.get(self.name, 0) + 1
            return self.inner.validate_python(*args, **kwargs)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    for name, cls in (("params", params_mod.AdamParams), ("wire", wire.AdamParams), ("body", wire.OptimStepBody)):
        monkeypatch.setattr(cls, "__pydantic_validator__", Counting(name, cls.__pydantic_validator__))
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        s.forward_backward([samples.cross_entropy([1, 2, 3, 4])])
        params = rlnb.AdamParams(learning_rate=1e-3, grad_clip_norm=0.5)
        step = s.optim_step(params).result(30)
    assert step.step == 1 and step.metrics["grad_clip_norm"] == 0.5 and step.metrics["learning_rate"] == 1e-3
    assert counts == {"params": 2}


@pytest.mark.parametrize(
    "optimizer, made, field",
    [
        ("adam", lambda: rlnb.AdamParams.model_construct(learning_rate=-5.0), "AdamParams.learning_rate = -5.0"),
        ("adam", lambda: rlnb.AdamParams.model_construct(learning_rate=float("nan")), "AdamParams.learning_rate = nan"),
        ("adam", lambda: rlnb.AdamParams.model_construct(beta2=1.0), "AdamParams.beta2 = 1.0"),
        ("muon", lambda: rlnb.MuonParams.model_construct(momentum=-1.0), "MuonParams.momentum = -1.0"),
        (
            "muon",
            lambda: rlnb.MuonParams.model_construct(adam=rlnb.AdamParams.model_construct(eps=float("inf"))),
            "MuonParams.adam.eps = inf",
        ),
    ],
)
def test_params_made_unchecked_are_refused_before_a_step_as_the_server_refuses_them(optimizer, made, field):
    """Pydantic's ``model_construct`` (its public skip-validation path) made params no check had seen: the in-process
    engine stepped with ``learning_rate=-5`` or NaN (every weight NaN after) where ``rlnb serve`` refused the same body
    with a 400. Now the session checks its copy with the params' own validators, before anything is submitted: the
    error names the field and its range, the weights and the gradients are untouched, and a good step goes on."""
    with local_session(model="tiny", optimizer=optimizer, seed=0, record=False) as s:
        s.forward_backward([samples.cross_entropy(list(b"unchecked"))]).result(30)
        before = params_of(s.backend.trainer)
        with pytest.raises(rlnb.InvalidParams, match="must be a finite number") as refused:
            s.optim_step(made())
        assert str(refused.value).startswith(f"{field} is invalid: ")
        assert all(torch.equal(v, params_of(s.backend.trainer)[k]) for k, v in before.items())
        assert len(s.history.df) == 1  # nothing was submitted
        step = s.optim_step().result(30)  # the forward-backward's gradients are still there
        assert step.step == 1 and step.metrics["grad_norm"] > 0
        assert all(torch.isfinite(v).all() for v in params_of(s.backend.trainer).values())


def test_updated_at_moves_when_an_operation_changes_the_session_and_only_then():
    """A local session's ``updated_at`` stayed at its creation while ``step``, ``policy_state`` and its checkpoint
    lists moved (``rlnb serve``'s moves: the two say the same). A forward-backward or a sample changes none of
    the session's fields: it stays."""
    with local_session(record=False) as s:
        created = s.info().updated_at
        assert created == s.info().created_at
        s.forward_backward([samples.cross_entropy(list(range(1, 8)))]).result()
        s.sample([[1, 2]], max_tokens=2).result()
        assert s.info().updated_at == created
        for submit in (lambda: s.optim_step(), s.weights_sync, s.save_training_checkpoint):
            before = s.info().updated_at
            time.sleep(0.002)
            submit().result()
            after = s.info()
            assert after.updated_at > before and after.updated_at >= after.created_at
        assert s.info().step == 1 and s.info().training_checkpoints


def test_a_module_an_open_session_trains_is_refused_to_a_second_session():
    """Two open sessions given one ``nn.Module`` trained the same tensors: the first one's optim-step moved the second
    one's model, silently. A module is free again once its session is closed (it keeps the weights trained)."""
    model = Bigram()
    with local_session(model=model) as first:
        with pytest.raises(ValueError, match=r"model \(Bigram\) is the model of another open session.*copy\.deepcopy"):
            local_session(model=model)
        with local_session(model=copy.deepcopy(model)) as other:  # a copy trains on its own
            other.forward_backward([samples.cross_entropy([1, 2, 3])])
            other.optim_step(rlnb.AdamParams(learning_rate=0.1)).result()
            assert not states_equal(params_of(first.backend.trainer), params_of(other.backend.trainer))
    with local_session(model=model) as again:
        assert again.backend.trainer is model
