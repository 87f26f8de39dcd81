"""A LoRA session's merged export of a model whose head is tied to its embedding: its config says what its weights
hold, so that a loader trusting the config (or a later ``tie_weights()``) gets the trained head, not the base's."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator

import pytest
import torch

import rlnb
from rlnb import samples
from tests.support import hf_models

pytestmark = pytest.mark.usefixtures("peft", "transformers")  # Hugging Face: slow, skipped without them

HEAD = {"gpt2": ("lm_head.weight", "transformer.wte.weight"), "qwen3": ("lm_head.weight", "model.embed_tokens.weight")}


@contextlib.contextmanager
def transformers_log() -> Iterator[list[str]]:
    """What transformers logs meanwhile (its loggers do not propagate to the root logger, so caplog misses them)."""
    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    root = logging.getLogger("transformers")
    root.addHandler(handler)
    try:
        yield lines
    finally:
        root.removeHandler(handler)


def export(folder, tmp_path, train_unembed: bool):
    """The merged folder of a LoRA session of ``folder`` after 2 steps, and its trained model's logits of ``ids``."""
    lora = {"rank": 4, "alpha": 8, "train_unembed": train_unembed}
    with hf_models.local(str(folder), lora=lora, threads=1, checkpoint_dir=tmp_path / "ck") as s:
        for _ in range(2):
            s.forward_backward([samples.from_text(s, "the model answers", " 42 digits", eos=True)])
            s.optim_step(rlnb.AdamParams(learning_rate=0.05))
        path = s.backend.checkpoint_path(s.save_inference_checkpoint().result().checkpoint.id)
        ids = torch.tensor([s.encode("n=42 the model")])
        with torch.no_grad():
            expected = s.backend.adapter.forward(s.backend.trainer, ids)
    return path / "merged", ids, expected


@pytest.mark.parametrize("arch", ["gpt2", "qwen3"])
def test_a_trained_tied_head_is_exported_untied_and_loads_without_transformers_warning(arch, tmp_path, transformers):
    """peft wraps the head, so the embedding's tensor is the head's ``weight``: the head's key was looked up as the
    first state-dict key holding it, the embedding's, and the two compared equal to themselves. The config said tied,
    transformers loaded the file only because it saw the two differ ("we will NOT tie them"), and ``tie_weights()``
    gave the base model's head back."""
    folder = hf_models.save(arch, tmp_path / arch, tie_word_embeddings=True)
    merged, ids, expected = export(folder, tmp_path, train_unembed=True)
    assert json.loads((merged / "config.json").read_text())["tie_word_embeddings"] is False
    from safetensors.torch import load_file

    weights = load_file(merged / "model.safetensors")
    head, emb = HEAD[arch]
    assert not torch.equal(weights[head], weights[emb])  # LoRA trained the head apart from the embedding
    with transformers_log() as log:
        model = transformers.AutoModelForCausalLM.from_pretrained(merged).eval()
    assert not [line for line in log if "NOT tie" in line]
    model.tie_weights()  # what a loader trusting the config does (resize_token_embeddings, say)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, expected, atol=1e-4, rtol=0)


def test_a_tied_head_lora_did_not_train_stays_tied(tmp_path, transformers):
    folder = hf_models.save("qwen3", tmp_path / "qwen3", tie_word_embeddings=True)
    merged, ids, expected = export(folder, tmp_path, train_unembed=False)
    assert json.loads((merged / "config.json").read_text())["tie_word_embeddings"] is True
    with transformers_log() as log:
        model = transformers.AutoModelForCausalLM.from_pretrained(merged).eval()
    assert not [line for line in log if "NOT tie" in line]
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, expected, atol=1e-4, rtol=0)
