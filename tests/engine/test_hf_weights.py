"""What a Hugging Face folder's weights and generation config must hold for rlnb to use them: an inference
checkpoint's ``merged/`` folder checked as a model folder is, an end-of-sequence id inside the vocabulary."""

from __future__ import annotations

import json

import pytest

from rlnb.engine.models.hf import ModelLoadError
from tests.support import hf_models
from tests.support.hf_models import config_with, crafted, drop_weights, local

pytestmark = pytest.mark.usefixtures("transformers")  # Hugging Face: slow, skipped without transformers

MERGED = {
    "layer-missing": (lambda f: drop_weights(f, ".h.1."),  # resumed with random layers, without a word
                      r"lacks 12 of the model's weights \(transformer\.h\.1\.attn\.c_attn\.bias, .*\): they would be "
                      r"random"),
    "vocab-differs": (config_with(vocab_size=1000),  # "look at the above report!", a report never shown
                      r"config\.json does not match its weights: .*transformer\.wte\.weight is \[320, 64\] in the "
                      r"checkpoint but \[1000, 64\] by the config"),
}  # fmt: skip


@pytest.mark.parametrize("case", MERGED)
def test_a_merged_folder_lacking_or_mismatching_weights_is_refused_at_resume_naming_them(tmp_path, case):
    """``resume_from`` an inference checkpoint whose ``merged/`` lost a layer's weights: transformers made them up
    (random), and the session resumed on them as if they were the trained model's."""
    change, problem = MERGED[case]
    model = str(hf_models.save("gpt2", tmp_path / "m"))
    with local(model, checkpoint_dir=tmp_path / "ck") as s:
        folder = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
    change(folder / "merged")
    meta = json.loads((folder / "rlnb.json").read_text())  # as an older rlnb saved it: the digests would refuse it
    meta.pop("merged_sha256")  # first (tests/engine/test_inference_digests.py), before the loader's own check
    (folder / "rlnb.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=problem) as info:
        local(model, resume_from=str(folder))
    assert str(folder) in str(info.value) and "above report" not in str(info.value)


def generation_eos(eos):
    def change(folder):
        config = json.loads((folder / "generation_config.json").read_text())
        (folder / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": eos}))

    return change


@pytest.mark.parametrize("eos", [5000, [2, 320], -1])
def test_a_generation_config_eos_past_the_vocabulary_is_refused_naming_it(tmp_path, eos):
    """``generation_config.json`` naming an end-of-sequence id the model cannot sample (5000 of 320 tokens) was taken
    silently: the samples it should have ended ran to max_tokens. ``eos_token_id=`` passed by hand is refused so."""
    folder = crafted(tmp_path / "m", generation_eos(eos))
    bad = eos[-1] if isinstance(eos, list) else eos
    with pytest.raises(ModelLoadError, match=rf"generation_config\.json ends samples on token id {bad}, .*320 tokens"):
        local(str(folder))


def test_a_loaded_models_generation_config_eos_past_the_vocabulary_is_refused_naming_it():
    model = hf_models.build_model("llama")
    model.generation_config.eos_token_id = 400
    with pytest.raises(ModelLoadError, match=r"generation config .* ends samples on token id 400, .*320 tokens"):
        local(model)
    model.generation_config.eos_token_id = 319  # the last id of the vocabulary is one
    with local(model) as s:
        assert 319 in s.backend.adapter.codec.eos_token_ids
