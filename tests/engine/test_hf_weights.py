"""What a Hugging Face folder's weights and generation config must hold for rlnb to use them: an inference
checkpoint's ``merged/`` folder checked as a model folder is, an end-of-sequence id inside the vocabulary."""

from __future__ import annotations

import pytest

from tests.engine.test_hf import config_with, drop_weights, local
from tests.support import hf_models

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
    with pytest.raises(ValueError, match=problem) as info:
        local(model, resume_from=str(folder))
    assert str(folder) in str(info.value) and "above report" not in str(info.value)
