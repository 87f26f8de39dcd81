"""Hugging Face causal LMs in the in-process backend: loading, the RL loop, the KV-cached sampler, errors.

The models are tiny GPT-2 / Llama / Qwen3 built from configs at test time and saved to folders
(``tests/support/hf_models.py``), loaded through the same path a user's directory takes.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb.engine import sampling
from rlnb.engine.checkpoints import CheckpointMismatch
from rlnb.engine.models.decoders import RecomputeDecoder
from rlnb.engine.models.hf import ModelLoadError
from tests.support import hf_models
from tests.support.fake_api import BASE, KEY, FakeAPI
from tests.support.hf_models import config_with, crafted, drop_weights, local

pytestmark = pytest.mark.usefixtures("transformers")  # Hugging Face: slow, skipped without transformers
ARCHS = ("gpt2", "llama", "qwen3")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_rl_loop_on_each_architecture(hf_dirs, arch, optimizer):
    """Text prompts in, decoded text out, a GRPO step on a digit reward, the sampler only moving at sync."""
    params = rlnb.AdamParams(learning_rate=1e-3) if optimizer == "adam" else rlnb.MuonParams(learning_rate=0.02)
    with local(hf_dirs[arch], optimizer=optimizer, seed=0) as s:
        assert s.tokenizer is not None and s.backend.adapter.kind == "hf"
        prompts = ["n=", "the answer is"]
        before = s.sample(prompts, num_samples=4, max_tokens=6, seed=3).result()
        batch, rewards = [], []
        for prompt, result in zip(prompts, before.results, strict=True):
            ids = s.encode(prompt)
            group = []
            for seq in result.sequences:
                assert seq.text == s.decode(seq.tokens, skip_special=True)
                group.append(sum(c.isdigit() for c in seq.text) / max(len(seq.text), 1))
            mean = statistics.fmean(group)
            for seq, r in zip(result.sequences, group, strict=True):
                batch.append(samples.policy(ids, seq.tokens, seq.logprobs, r - mean))
            rewards += group
        fb = s.forward_backward(batch, "grpo")
        step = s.optim_step(params).result()
        assert step.step == 1 and fb.result().loss == fb.result().loss
        stale = s.sample(prompts, num_samples=4, max_tokens=6, seed=3).result()
        assert [q.tokens for q in stale.results[0].sequences] == [q.tokens for q in before.results[0].sequences]
        assert s.weights_sync().result().weights_version == 1
        fresh = s.sample(prompts, num_samples=4, max_tokens=6, seed=3).result()
        assert [q.logprobs for q in fresh.results[0].sequences] != [q.logprobs for q in before.results[0].sequences]


def _decode_both(adapter, model, prompts, n, max_tokens, seed, **settings):
    cfg = sampling.Settings(max_tokens=max_tokens, **settings)
    longest = max(len(p) for p in prompts) + max_tokens
    with torch.no_grad():
        cached = sampling.generate(
            adapter.decoder(model, len(prompts) * n, longest), prompts, n, cfg, seed, adapter.codec, adapter.device
        )
        plain = sampling.generate(
            RecomputeDecoder(lambda ids, mask: adapter.forward(model, ids, mask)),
            prompts,
            n,
            cfg,
            seed,
            adapter.codec,
            adapter.device,
        )
    return cached, plain


@pytest.mark.parametrize("model", ["tiny", *ARCHS])
def test_cached_and_uncached_decoding_agree(hf_dirs, model):
    """Same tokens, and log-probs within 1e-4 (fp32), with prompts of different lengths (left padding)."""
    with local(hf_dirs.get(model, model), seed=1) as s:
        adapter, sampler = s.backend.adapter, s.backend.sampler
        prompts = [s.encode("n="), s.encode("the loss goes down"), s.encode("a")]
        cached, plain = _decode_both(adapter, sampler, prompts, n=3, max_tokens=12, seed=11, top_p=0.9)
    for got, ref in zip(cached, plain, strict=True):
        for a, b in zip(got, ref, strict=True):
            assert a.tokens == b.tokens
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_logprobs_equal_the_trainers(hf_dirs, arch):
    """The sampler's (cached, left-padded) log-probs are what forward-backward recomputes on the same weights."""
    with local(hf_dirs[arch]) as s:
        prompts = [s.encode("the model answers"), s.encode("n=")]
        out = s.sample(prompts, num_samples=2, max_tokens=8, seed=4).result()
        pairs = zip(prompts, out.results, strict=True)
        batch = [samples.policy(p, q.tokens, q.logprobs, 1.0) for p, r in pairs for q in r.sequences]
        fb = s.forward_backward(batch, "importance_sampling", forward_only=True).result()
    assert fb.metrics["loss/ratio/mean"] == pytest.approx(1.0, abs=1e-4)
    assert fb.metrics["loss/sampler_kl/mean"] == pytest.approx(0.0, abs=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_logprobs_in_chunks_equal_one_forward(hf_dirs, arch, monkeypatch):
    """Prompt log-probs come a few positions at a time through the model's cache (a 32k-token prompt's logits
    over a 151k vocabulary would be 19 GB at once): the same values and top-k as one full forward."""
    from rlnb.engine.models import decoders

    with local(hf_dirs[arch]) as s:
        prompt = s.encode("the loss goes down and the reward goes up")
        vocab = s.backend.adapter.vocab_size
        monkeypatch.setattr(decoders, "PROMPT_LOGIT_BYTES", 4 * vocab * 3)  # chunks of 3 positions
        got = s.sample([prompt], max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=4).result().results[0]
        with torch.no_grad():
            logp = torch.log_softmax(s.backend.adapter.forward(s.backend.sampler, torch.tensor([prompt]))[0], -1)
    assert len(prompt) > 9 and len(got.prompt_logprobs) == len(prompt) and got.prompt_logprobs[0] == 0.0
    want = logp[:-1].gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(got.prompt_logprobs[1:]), want, atol=1e-5, rtol=0)
    top = logp[:-1].topk(4, dim=-1)
    assert [t.token_ids for t in got.topk_prompt_logprobs[1:]] == top.indices.tolist()
    torch.testing.assert_close(
        torch.tensor([t.logprobs for t in got.topk_prompt_logprobs[1:]]), top.values, atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_match_transformers_generate(hf_dirs, arch):
    with local(hf_dirs[arch]) as s:
        prompts = ["n=", "the model answers in"]
        ours = s.sample(prompts, max_tokens=10, temperature=0).result()
        tok = s.tokenizer
        enc = tok(prompts, padding=True, return_tensors="pt")
        with torch.no_grad():
            ref = s.backend.sampler.generate(
                **enc,
                max_new_tokens=10,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=tok.pad_token_id,
                min_new_tokens=10,
            )
    for i, result in enumerate(ours.results):
        expected = ref[i, enc["input_ids"].shape[1] :].tolist()
        got = result.sequences[0].tokens
        assert got == expected[: len(got)]
        assert len(got) == 10 or result.sequences[0].stop_reason == "STOP_REASON_STOP"


def test_stop_strings_and_eos_come_from_the_tokenizer(hf_dirs):
    with local(hf_dirs["llama"], seed=2) as s:
        greedy = s.sample("the", max_tokens=12, temperature=0).result().results[0].sequences[0]
        assert greedy.stop_reason == "STOP_REASON_LENGTH"
        # a stop string from the middle of the greedy text ends the sequence right after it appears
        target = greedy.text[len(greedy.text) // 2 :][:2]
        stopped = s.sample("the", max_tokens=12, temperature=0, stop=[target]).result().results[0].sequences[0]
        assert stopped.stop_reason == "STOP_REASON_STOP" and target in stopped.text
        assert target not in s.decode(stopped.tokens[:-1])
        assert greedy.tokens[: len(stopped.tokens)] == stopped.tokens
    first = greedy.tokens[2]
    with local(hf_dirs["llama"], seed=2, eos_token_id=first) as s:  # an extra EOS besides the tokenizer's
        assert s.tokenizer.eos_token_id in s.codec.eos_token_ids
        ended = s.sample("the", max_tokens=12, temperature=0).result().results[0].sequences[0]
        assert ended.tokens == greedy.tokens[:3] and ended.stop_reason == "STOP_REASON_STOP"


def test_stop_strings_match_incrementally_across_multibyte_characters():
    """The byte model: a stop string spanning a multi-byte character split across tokens."""
    from rlnb.engine.stops import StopMatcher
    from rlnb.text.codec import ByteCodec

    m = StopMatcher(ByteCodec(), ["é!"])
    hits = [m.push(b) for b in "café!".encode()]
    assert hits == [False] * 5 + [True] and m.text == "café!"


class _PairCodec:
    """Tokens of two bytes each (as BPE merges bytes): one token can end a stop string and begin a character."""

    def decode(self, tokens, skip_special=False):
        return b"".join(t.to_bytes(2, "big") for t in tokens).decode("utf-8", errors="replace")


def test_a_stop_string_before_half_a_character_ends_the_sequence_on_that_token():
    """adv5a: a token "!" + the first byte of "é" ends with U+FFFD; the matcher waited for the rest of the
    character, so when that token was the last one the stop "!" was missed (STOP_REASON_LENGTH)."""
    from rlnb.engine.stops import StopMatcher

    data = "ab!é".encode()  # tokens b"ab" and b"!\xc3": the second ends the stop "!" and begins "é"
    tokens = [int.from_bytes(data[i : i + 2], "big") for i in (0, 2)]
    m = StopMatcher(_PairCodec(), ["!"])
    assert [m.push(t) for t in tokens] == [False, True]
    m = StopMatcher(_PairCodec(), ["é"])  # not yet whole: no match until its last byte comes
    assert [m.push(t) for t in tokens] == [False, False]


def test_a_sampled_sequences_text_leaves_out_its_eos(hf_dirs, transformers):
    """``.text`` is what a reward reads (``decode(..., skip_special=True)``): an exact-match on "the answer" must
    not see the tokenizer's "</s>" that ended the sequence; ``.tokens`` keep the EOS id."""
    model = hf_models.build_model("llama", seed=0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dirs["llama"])
    ids = tokenizer("the", return_tensors="pt").input_ids
    with torch.no_grad():  # the EOS row becomes a multiple of the greedy first token's row: EOS wins at step 1
        first = int(model(ids).logits[0, -1].argmax())
        model.lm_head.weight[tokenizer.eos_token_id] = 50 * model.lm_head.weight[first]
    with local(model, tokenizer=tokenizer) as s:
        seq = s.sample("the", max_tokens=4, temperature=0).result().results[0].sequences[0]
        assert seq.tokens == [tokenizer.eos_token_id] and seq.stop_reason == "STOP_REASON_STOP"
        assert s.decode(seq.tokens) == "</s>" and seq.text == ""


def test_chat_messages_and_text_samples(hf_dirs):
    with local(hf_dirs["qwen3"]) as s:
        chat = [{"role": "user", "content": "give me a number"}]
        ids = s.encode(chat)
        assert s.decode(ids).endswith("<s>assistant:")
        out = s.sample(chat, num_samples=2, max_tokens=4, seed=0).result()
        assert len(out.results) == 1 and len(out.results[0].sequences) == 2
        sft = samples.from_text(s, "question: n=", " 42")
        prompt_len = len(s.encode("question: n="))
        weights = sft.loss_fn_inputs["weights"].data
        assert sum(weights) == len(weights) - (prompt_len - 1)
        assert weights[: prompt_len - 1] == [0.0] * (prompt_len - 1)
        conv = samples.from_chat(s, [*chat, {"role": "assistant", "content": "7"}])
        inputs = conv.loss_fn_inputs
        trained = [t for t, w in zip(inputs["target_tokens"].data, inputs["weights"].data, strict=True) if w]
        assert s.decode(trained) == " 7</s>"
        assert s.forward_backward([sft, conv]).result().loss > 0
        before = len(s.history)
        for bad in ({"role": "user"}, {"content": "hi"}, {"role": "user", "content": 5}):  # the template rendered
            with pytest.raises(ValueError, match=r"prompts\[0\]\[0\]\['(role|content)'\] must be"):  # them
                s.sample([[bad]], max_tokens=2)
        with pytest.raises(ValueError, match=r"tokens: token -1 is outside the vocabulary \[0, 320\)"):
            s.decode([5, -1])  # an OverflowError from the tokenizer
        assert s.decode([67, 310]) == s.decode([67]) + "\ufffd"  # a padded row past the tokenizer: was dropped
        with pytest.raises(TypeError, match="bytes, which are token ids only for a byte-level model"):
            s.sample(b"n=", max_tokens=2)  # b"n=" was the ids 110, 61: another prompt in this vocabulary
        assert len(s.history) == before


def test_an_already_loaded_model_with_its_tokenizer(hf_dirs, transformers):
    model = hf_models.build_model("gpt2", seed=3)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dirs["gpt2"])
    with local(model, tokenizer=tokenizer, optimizer="muon") as s:
        assert s.backend.adapter.kind == "hf" and s.tokenizer is tokenizer
        # GPT-2 ties its head to the token embedding: one tensor, AdamW by role
        adam = {n for n, _ in s.backend.optim.split.adam}
        assert "transformer.wte.weight" in adam and "transformer.wpe.weight" in adam
        assert s.sample("n=", max_tokens=3).result().results[0].sequences[0].text is not None
        s.forward_backward([samples.cross_entropy(s.encode("n=42"))])
        assert s.optim_step().result().step == 1


# -- bad input: clear errors naming the value, before any operation runs ---------------------------


def test_unknown_model_id_names_it_and_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError, match=r"'Qwen/Qwen3-0\.6B'.*hf download Qwen/Qwen3-0\.6B"):
        local("Qwen/Qwen3-0.6B")
    with pytest.raises(ModelLoadError, match="neither a local directory"):
        local(str(tmp_path / "no" / "such" / "dir"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        local(str(tmp_path / "empty"))


def test_a_file_given_as_the_model_or_tokenizer_folder_names_its_folder(hf_dirs, tmp_path):
    """``model=".../config.json"`` (or the weights file) was "neither a local directory nor a Hugging Face model id"."""
    config = Path(hf_dirs["llama"]) / "config.json"
    with pytest.raises(ModelLoadError, match=rf"^model '{config}' is a file, not a folder: give the folder that "
                                             rf"holds it, '{config.parent}'"):  # fmt: skip
        local(str(config))
    with pytest.raises(ModelLoadError, match=rf"^tokenizer '{config.parent / 'tokenizer.json'}' is a file, not a "):
        local("tiny", tokenizer=str(config.parent / "tokenizer.json"))


def test_a_folder_under_home_with_spaces_and_unicode_in_its_path_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    hf_models.save("llama", tmp_path / "my models" / "ü 模型")
    with local("~/my models/ü 模型", tokenizer="~/my models/ü 模型") as s:
        assert s.decode(s.encode("n=42")) == "n=42"
    with pytest.raises(ModelLoadError, match=r"'~/my models/ü 模型x' is neither a local directory"):
        local("~/my models/ü 模型x")


def test_a_mistyped_built_in_name_names_the_built_ins_too(tmp_path, monkeypatch):
    """``model="medium"`` advised only ``hf download medium``."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError, match=r"'medium'.*the built-in models are 'tiny', 'small'.*hf download medium"):
        local("medium")


def test_model_without_a_causal_lm_head(tmp_path, transformers):
    body = transformers.LlamaModel(transformers.LlamaConfig(**hf_models.HIDDEN))
    body.save_pretrained(tmp_path / "body")
    with pytest.raises(ModelLoadError, match="no trained causal-LM head.*lm_head.weight"):
        local(str(tmp_path / "body"))
    t5 = transformers.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2)
    t5.save_pretrained(tmp_path / "t5")
    with pytest.raises(ModelLoadError, match="no causal-LM head"):
        local(str(tmp_path / "t5"))


def test_tokenizer_larger_than_the_model(hf_dirs, tmp_path, transformers):
    small = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**hf_models.HIDDEN, "vocab_size": 100}))
    small.save_pretrained(tmp_path / "m")
    transformers.AutoTokenizer.from_pretrained(hf_dirs["llama"]).save_pretrained(tmp_path / "m")
    with pytest.raises(ModelLoadError, match="300 tokens but the model's embedding table has 100 rows"):
        local(str(tmp_path / "m"))


def test_a_model_folder_without_a_tokenizer_takes_token_ids_and_refuses_text(hf_dirs, tmp_path):
    folder = str(hf_models.save("qwen3", tmp_path / "notok", with_tokenizer=False))
    no_tokenizer = rf"model '{folder}' has no tokenizer: pass tokenizer= to rlnb.connect"
    with local(folder) as s:
        assert s.tokenizer is None
        for use_text in (
            lambda: s.encode("hello"),
            lambda: s.decode([300]),
            lambda: s.sample("hello"),
            lambda: s.sample([5, 6], stop="\n"),
            lambda: samples.from_text(s, "7 x 6 =", " 42"),
        ):
            with pytest.raises(ValueError, match=no_tokenizer):  # never raw bytes into a BPE vocabulary
                use_text()
        assert len(s.history) == 0  # refused before anything was submitted
        seq = s.sample([5, 6, 7], max_tokens=4, seed=0).result().results[0].sequences[0]
        assert len(seq.tokens) == 4 and seq.text is None  # token ids work; no made-up text
        assert s.forward_backward([samples.cross_entropy([5, 6, 7, 8])]).result().loss > 0
        body = wire.SampleBody(
            model_inputs=[wire.ModelInput.from_tokens([5, 6])],
            sampling_params=wire.SamplingParams(max_tokens=2, stop=["\n"]),
        )
        with pytest.raises(rlnb.OperationFailed, match="sampling_params.stop: model .* has no tokenizer") as info:
            s._submit("sample", body).result(timeout=30)  # as a server's client sends it: refused, not INTERNAL_ERROR
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
    with local(folder, tokenizer=hf_dirs["qwen3"]) as s:  # tokenizer= gives it one
        assert s.tokenizer is not None and s.decode(s.encode("n=42")) == "n=42"
    with local(Path(folder), tokenizer=Path(hf_dirs["qwen3"])) as s:  # Paths: were refused / taken for a tokenizer
        assert s.tokenizer is not None and s.decode(s.encode("n=42")) == "n=42"


def test_a_tokenizer_folder_without_a_model_config_is_a_tokenizer(hf_dirs, tmp_path, transformers):
    """``tokenizer.save_pretrained(folder)`` writes no config.json: such a folder, given as ``tokenizer=``, was refused
    as "a directory but holds no config.json: not a Hugging Face model"; a folder or id that is no tokenizer is named
    as the tokenizer, not as a model."""
    transformers.AutoTokenizer.from_pretrained(hf_dirs["llama"]).save_pretrained(tmp_path / "tok")
    assert not (tmp_path / "tok" / "config.json").exists()
    folder = str(hf_models.save("llama", tmp_path / "notok", with_tokenizer=False))
    with local(folder, tokenizer=str(tmp_path / "tok")) as s:
        assert s.tokenizer is not None and s.decode(s.encode("n=42")) == "n=42"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"tokenizer '.*empty' is a directory but holds no tokenizer files"):
        local(folder, tokenizer=str(tmp_path / "empty"))
    with pytest.raises(ModelLoadError, match=r"^tokenizer '.*nope' is neither a local directory"):
        local(folder, tokenizer=str(tmp_path / "nope"))


@pytest.mark.parametrize("model", ["tiny", "custom"])
def test_a_tokenizer_larger_than_a_built_in_or_custom_models_vocabulary_is_refused_at_connect(hf_dirs, model):
    """A 300-token tokenizer on ``tiny`` (256 rows) was taken: its text then failed prompt by prompt ("token 261 is
    outside the vocabulary [0, 256)"), a forward-backward only once it ran."""
    from tests.support.bigram import Bigram

    tokenizer = str(hf_dirs["llama"])
    given = "tiny" if model == "tiny" else Bigram()
    with pytest.raises(ModelLoadError, match=r"tokenizer of .* has 300 tokens but the model's embedding table has"):
        local(given, tokenizer=tokenizer)


def test_an_inference_checkpoint_whose_merged_folder_was_deleted_is_named_offline(hf_dirs, tmp_path, monkeypatch):
    """``resume_from="ckpt-infer-…"`` (relative) with its ``merged/`` deleted by hand: transformers took
    ``ckpt-infer-…/merged`` for a hub id and asked huggingface.co for it (47 s of retries offline) before the error."""
    import socket

    looked_up = []

    def offline(*args, **kw):
        looked_up.append(args[0])
        raise socket.gaierror(socket.EAI_NONAME, "offline (test)")

    with local(hf_dirs["llama"], checkpoint_dir=tmp_path) as s:
        folder = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
    shutil.rmtree(folder / "merged")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(socket, "getaddrinfo", offline)
    with pytest.raises(ValueError, match=rf"resume_from '{folder.name}': its merged weights folder .* is gone"):
        local(hf_dirs["llama"], resume_from=folder.name)
    assert looked_up == []


def test_an_inference_checkpoint_of_a_model_with_a_tokenizer_of_ones_own_keeps_its_weights(tmp_path):
    """``tokenizer=`` an object with ``encode`` and ``decode`` only: every inference checkpoint failed INTERNAL_ERROR
    "'Chars' object has no attribute 'save_pretrained'", nothing of the trained model saved."""
    from tests.support.chars import Chars

    folder = str(hf_models.save("llama", tmp_path / "notok", with_tokenizer=False))
    with local(folder, tokenizer=Chars(), checkpoint_dir=tmp_path) as s:
        saved = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
    merged = {p.name for p in (saved / "merged").iterdir()}
    assert {"config.json", "model.safetensors"} <= merged and "tokenizer.json" not in merged  # none to save


def test_resume_knows_a_model_folder_however_its_path_is_spelled(tmp_path, monkeypatch):
    for seed, where in enumerate(("a", "b")):  # two different models in folders with the same relative name
        hf_models.save("llama", tmp_path / where / "m", with_tokenizer=False, seed=seed)
    monkeypatch.chdir(tmp_path / "a")
    with local("m", checkpoint_dir=tmp_path / "ck") as s:
        s.forward_backward([samples.cross_entropy([5, 6, 7, 8])])
        s.optim_step()
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
    for spelling in ("./m", "m/", str(tmp_path / "a" / "m"), str(tmp_path / "a" / "m") + "/"):
        with local(spelling, resume_from=path) as r:
            assert r.step == 1
    monkeypatch.chdir(tmp_path / "b")  # "m" here is another folder: not the checkpoint's model
    with pytest.raises(CheckpointMismatch, match=rf"checkpoint is of model '{tmp_path / 'a' / 'm'}'"):
        local("m", resume_from=path)


def _trained_checkpoint(model, tmp_path, **kw):
    """One step on ``model``, then a training checkpoint: its path and the trained weights."""
    with local(model, checkpoint_dir=tmp_path / "ck", seed=0, **kw) as s:
        s.forward_backward([samples.cross_entropy([5, 6, 7, 8])])
        s.optim_step()
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result().checkpoint.id)
        return path, {k: v.clone() for k, v in s.backend.trainer.state_dict().items()}


@pytest.mark.parametrize("lora", [False, True])
def test_resume_finds_its_base_model_in_a_moved_folder(tmp_path, lora):
    """A checkpoint named its base model by folder, so a resume from the same model moved or copied elsewhere
    (another disk, another machine's path) was a CheckpointMismatch. It keeps the base weights' fingerprint
    (``model_setup.fingerprint``): the same weights anywhere are its base."""
    first = hf_models.save("llama", tmp_path / "models" / "m", with_tokenizer=False)
    path, trained = _trained_checkpoint(str(first), tmp_path, lora=lora)
    moved = tmp_path / "elsewhere" / "copy-of-m"
    moved.parent.mkdir()
    shutil.move(first, moved)
    with local(str(moved), resume_from=path, lora=lora) as r:
        assert r.step == 1
        resumed = r.backend.trainer.state_dict()
        assert resumed.keys() == trained.keys() and all(torch.equal(resumed[k], trained[k]) for k in trained)


def test_a_lora_checkpoint_is_refused_on_other_weights_in_its_own_folder(tmp_path):
    """A LoRA checkpoint keeps only the adapter; a resume whose folder now holds other weights (a new revision
    downloaded over it, another model saved there) loaded that adapter onto them without a word. The base weights'
    fingerprint tells them apart. A full-weight checkpoint replaces every weight: it still resumes there."""
    folder = hf_models.save("llama", tmp_path / "m", with_tokenizer=False)
    lora_path, _ = _trained_checkpoint(str(folder), tmp_path, lora=True)
    full_path, trained = _trained_checkpoint(str(folder), tmp_path)
    hf_models.save("llama", folder, with_tokenizer=False, seed=1)  # other weights, the same folder
    with pytest.raises(CheckpointMismatch, match=r"LoRA adapter was trained on other base weights than this "
                                                 rf"session's model '{folder}'"):  # fmt: skip
        local(str(folder), resume_from=lora_path, lora=True)
    with local(str(folder), resume_from=full_path) as r:
        resumed = r.backend.trainer.state_dict()
        assert all(torch.equal(resumed[k], trained[k]) for k in trained)


def test_prompt_longer_than_the_context_and_cuda_without_cuda(hf_dirs):
    with local(hf_dirs["llama"]) as s:
        with pytest.raises(ValueError, match=r"prompts\[0\] has 300 tokens.*context of 256"):
            s.sample([[5] * 300])
        with pytest.raises(ValueError, match=r"max_tokens 100.*context of 256"):
            s.sample([[5] * 200], max_tokens=100)
        with pytest.raises(ValueError, match=r"250 tokens \+ max_tokens 16 \(the default: max_tokens is unset\).*256"):
            s.sample([[5] * 250])  # unset max_tokens is the backend's default, 16: checked before sending
        assert len(s.history) == 0  # refused before anything was submitted
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' but this torch has no CUDA"):
            local("tiny", device="cuda")


def test_dtype_choice(hf_dirs):
    with local(hf_dirs["llama"], dtype="bfloat16") as s:
        assert next(s.backend.trainer.parameters()).dtype == torch.bfloat16
        assert s.history.config["dtype"] == "bfloat16"
        seq = s.sample("n=", max_tokens=4, seed=0).result().results[0].sequences[0]
        assert len(seq.logprobs) == len(seq.tokens) and all(lp <= 0 for lp in seq.logprobs)
    with pytest.raises(ValueError, match="dtype must be one of auto, float32, bfloat16, float16, got 'float8'"):
        local("tiny", dtype="float8")


@pytest.mark.slow
def test_a_folder_with_its_own_code_is_refused_unless_trusted_on_purpose(tmp_path, monkeypatch):
    """transformers asked on stdin whether to run the folder's code inside rlnb.connect; answering y ran it."""
    folder = hf_models.with_own_code(tmp_path / "m")
    marker = tmp_path / "ran"
    monkeypatch.setenv("RLNB_TEST_MARKER", str(marker))
    refusal = r"its own Python code: .*config\.json maps AutoConfig, AutoModelForCausalLM .*trust_remote_code=True"
    with pytest.raises(ModelLoadError, match=refusal):
        local(str(folder))
    with pytest.raises(ModelLoadError, match=refusal):
        local("tiny", tokenizer=str(folder))
    fake = FakeAPI()
    with pytest.raises(ModelLoadError, match=refusal):  # before a remote session is started
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), tokenizer=str(folder))
    no = r"trust_remote_code must be True or False, got 'no'"  # "no" is truthy: it ran the folder's code
    with pytest.raises(ValueError, match=no):
        local(str(folder), trust_remote_code="no")
    with pytest.raises(ValueError, match=no):
        local("tiny", tokenizer=str(folder), trust_remote_code="no")
    with pytest.raises(ValueError, match=no):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), tokenizer=str(folder),
                     trust_remote_code="no")  # fmt: skip
    assert not fake.calls() and not marker.exists()

    script = "import sys, rlnb\n" \
        "s = rlnb.connect('local', model=sys.argv[1], trust_remote_code=True, device='cpu', record=False)\n" \
        "print(type(s.backend.trainer).__name__)"  # fmt: skip
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "RLNB_TEST_MARKER": str(marker)}
    out = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, env=env,
                         timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "CustomLM" and marker.read_text() == "the folder's code ran"


CRAFTED = {
    "deep-config": (lambda f: (f / "config.json").write_text("[" * 100_000 + "]" * 100_000),
                    r"config\.json cannot be read \(RecursionError"),
    "config-not-json": (lambda f: (f / "config.json").write_text("{model"),
                        r"config\.json cannot be read \(JSONDecodeError"),
    "config-a-list": (lambda f: (f / "config.json").write_text("[1]"),
                      r"config\.json cannot be read \(not a JSON object"),
    "bad-field": (config_with(n_embd="wide"), r"config\.json is not a config transformers can load \(.*n_embd"),
    "no-weights": (lambda f: (f / "model.safetensors").unlink(), r"the weights in .* cannot be loaded \(OSError"),
    "damaged-weights": (lambda f: (f / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"{damaged"),
                        r"the weights in .* cannot be loaded \(SafetensorError"),
    "damaged-tokenizer": (lambda f: (f / "tokenizer.json").write_text("{oops"), r"tokenizer .* cannot be loaded"),
    "layer-missing": (lambda f: drop_weights(f, ".h.1."),  # trained as random weights, without a word
                      r"lacks 12 of the model's weights \(transformer\.h\.1\.attn\.c_attn\.bias, .*\): they would be "
                      r"random"),
    "vocab-differs": (config_with(vocab_size=1000),  # "look at the above report!", a report never shown
                      r"config\.json does not match its weights: transformer\.wte\.weight is \[320, 64\] in the "
                      r"checkpoint but \[1000, 64\] by the config"),
    "fewer-layers": (config_with(n_layer=1),  # layer 1's weights dropped, a one-layer model trained, without a word
                     r"holds 11 weights the model it describes has no place for "
                     r"\(transformer\.h\.1\.attn\.c_attn\.weight, .*\): they would be dropped"),
    "unknown-type": (config_with(model_type="zorblax"),
                     r"config\.json is not a config transformers can load .*zorblax"),
    "shard-missing": (lambda f: sharded(f, lambda shards: shards[1].unlink()),
                      r"cannot be loaded \(FileNotFoundError: .*model-00002-of-"),
}  # fmt: skip


def sharded(folder, change):
    (folder / "model.safetensors").unlink()
    hf_models.build_model("gpt2").save_pretrained(folder, max_shard_size="100KB")
    change(sorted(folder.glob("model-*.safetensors")))


@pytest.mark.slow
@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_model_folder_is_a_model_load_error_naming_it(tmp_path, case):
    change, problem = CRAFTED[case]
    folder = crafted(tmp_path / case, change)
    with pytest.raises(ModelLoadError, match=problem) as info:
        local(str(folder))
    assert str(folder) in str(info.value) and isinstance(info.value, ValueError)
    assert "above report" not in str(info.value)
    assert info.value.__context__ is None or info.value.__suppress_context__


def test_base_model_dropout_copied_into_its_layers_is_off_and_draws_nothing_from_the_global_rng(transformers):
    """Llama's layers copy ``attention_dropout`` from the config when built: zeroing the config left it on. It made
    the trainer disagree with the sampler and drew its masks from torch's global RNG, which another session's
    forward in the same process (``rlnb serve``, a sweep) moved: the same seed gave other losses."""
    config = transformers.LlamaConfig(**hf_models.HIDDEN, bos_token_id=1, eos_token_id=2, attention_dropout=0.5)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config)
    with local(model) as s:
        datum = [samples.cross_entropy(list(range(3, 40)))]
        rng = torch.random.get_rng_state()
        first = s.forward_backward(datum).result().loss
        assert s.forward_backward(datum).result().loss == first
        assert torch.equal(torch.random.get_rng_state(), rng)  # nothing for a concurrent session to move


def test_muon_reads_gpt2s_conv1d_layers_by_their_fan_not_their_storage(hf_dirs):
    """GPT-2's attention and MLP layers are transformers' ``Conv1D``, their weights stored [in, out]: Muon's
    "original" scale read the stored shape, so every c_fc moved half as far as the same layer as an nn.Linear,
    every c_proj of the MLP twice as far (``test_optim.py`` checks the update itself on a Conv1D)."""
    from rlnb.sweep import muon_shapes

    with local(hf_dirs["gpt2"], optimizer="muon", seed=0) as s:
        split = s.backend.optim.split
        conv1d = {n for n, _ in split.muon if n.rsplit(".", 2)[-2] in ("c_attn", "c_proj", "c_fc")}
        assert conv1d and split.stored_in_out == conv1d
        shapes = dict(zip([n for n, _ in split.muon], muon_shapes(s), strict=True))
        fc = next(n for n in conv1d if ".mlp.c_fc." in n)
        assert shapes[fc] == tuple(reversed(dict(split.muon)[fc].shape))  # [4d, d]: it widens


class _KeepDropout(torch.nn.Module):
    """A layer's rate under a name no rule can find, passed to ``F.dropout``."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.keep = inner, 0.5

    def forward(self, x):
        return torch.nn.functional.dropout(self.inner(x), 1 - self.keep, self.training)


def test_a_model_still_random_in_train_mode_is_refused_at_connect_naming_the_module(transformers):
    """Dropout whose rate no name gives away trained with log-probs that disagreed with the sampler's, masks drawn
    from the global RNG; now ``connect`` runs the model twice in train mode and names the module."""
    config = transformers.LlamaConfig(**hf_models.HIDDEN, bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(config)
    model.model.layers[1].mlp = _KeepDropout(model.model.layers[1].mlp)
    with pytest.raises(ModelLoadError, match=r"is random in train mode .*: model\.layers\.1\.mlp \(_KeepDropout\)"):
        local(model)
    model.model.layers[1].mlp.keep = 1.0
    with local(model) as s:
        datum = [samples.cross_entropy(list(range(3, 40)))]
        assert s.forward_backward(datum).result().loss == s.forward_backward(datum).result().loss


TRAIN_RANDOM = {  # randomness of real architectures that no nn.Dropout and no *dropout* name held
    "mixtral-router-jitter": lambda tf: tf.MixtralForCausalLM(tf.MixtralConfig(
        **hf_models.HIDDEN, num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.5)),
    "opt-layerdrop": lambda tf: tf.OPTForCausalLM(tf.OPTConfig(
        vocab_size=hf_models.VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=4, num_attention_heads=4,
        max_position_embeddings=256, word_embed_proj_dim=64, layerdrop=0.5)),
}  # fmt: skip


@pytest.mark.parametrize("case", TRAIN_RANDOM)
def test_mixtral_router_jitter_and_opt_layerdrop_are_off(transformers, case):
    """Mixtral's ``router_jitter_noise`` and OPT's ``layerdrop`` stayed on: two equal forward-backwards gave other
    losses (207.20 and 207.15), from masks of the process-global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = TRAIN_RANDOM[case](transformers)
    with local(model) as s:
        datum = [samples.cross_entropy(list(range(3, 40)))]
        rng = torch.random.get_rng_state()
        assert s.forward_backward(datum).result().loss == s.forward_backward(datum).result().loss
        assert torch.equal(torch.random.get_rng_state(), rng)
