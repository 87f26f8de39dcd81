"""A resume onto a model folder whose config or tokenizer changed since the save, and folders given as ``model=`` that
hold an rlnb checkpoint or a peft adapter rather than a model (tiny Hugging Face models built at test time)."""

import json
import shutil

import pytest
import torch

from rlnb import samples
from rlnb.engine.checkpoints import CheckpointMismatch
from rlnb.engine.models.hf import ModelLoadError
from tests.support import hf_models
from tests.support.hf_models import local

pytestmark = pytest.mark.usefixtures("transformers")  # Hugging Face: slow, skipped without transformers

BATCH = [samples.cross_entropy(list(range(5, 30)))]


def _saved(folder, tmp_path, kind="training", **kw):
    """A step on ``folder``'s model, then a checkpoint of ``kind``: its path, and the forward-only loss at the save."""
    with local(str(folder), checkpoint_dir=tmp_path / "ck", threads=1, **kw) as s:
        s.forward_backward(BATCH).result()
        s.optim_step().result()
        save = s.save_training_checkpoint if kind == "training" else s.save_inference_checkpoint
        path = s.backend.checkpoint_path(save().result(timeout=60).checkpoint.id)
        return path, s.forward_backward(BATCH, forward_only=True).result().loss


def _set_config(folder, **fields):
    config = json.loads((folder / "config.json").read_text())
    kept = dict(config)
    config.update(fields)
    if "rope_parameters" in config and "rope_theta" in fields:  # transformers 5 reads the theta from here
        config["rope_parameters"] = {**config["rope_parameters"], "rope_theta": fields["rope_theta"]}
    (folder / "config.json").write_text(json.dumps(config))
    return kept


@pytest.mark.parametrize(("kind", "lora"), [("training", None), ("training", {"rank": 4}), ("inference", None)])
def test_a_resume_onto_a_changed_config_is_refused_naming_the_fields(tmp_path, kind, lora):
    """The weights' digest reads ``state_dict()`` only: a folder whose config.json changed (rope_theta, rms_norm_eps:
    the same weights, other logits; loss 176.56 at the save, 195.23 after the resume) was resumed in silence."""
    folder = hf_models.save("llama", tmp_path / "m")
    kw = {"lora": lora} if lora else {}
    path, at_save = _saved(folder, tmp_path, kind, **kw)
    kept = _set_config(folder, rope_theta=10.0, rms_norm_eps=0.5)
    said = r"another config than this session's model .*rms_norm_eps: 1e-06 at save, 0\.5 now; rope_parameters: "
    with pytest.raises(CheckpointMismatch, match=said):
        local(str(folder), resume_from=path, **kw)
    (folder / "config.json").write_text(json.dumps(kept))
    with local(str(folder), resume_from=path, threads=1, **kw) as r:  # the config as it was: the model at the save
        assert r.forward_backward(BATCH, forward_only=True).result().loss == pytest.approx(at_save, rel=1e-5)


def test_a_resume_onto_a_replaced_tokenizer_is_refused(tmp_path):
    """Other tokenizer files in the folder (same weights) encoded the same text to other tokens after the resume."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    folder = hf_models.save("llama", tmp_path / "m")
    path, _ = _saved(folder, tmp_path, lora={"rank": 4})
    shutil.copytree(folder, tmp_path / "kept")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=290, special_tokens=["<pad>", "<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(["zebra quartz jukebox " * 50, "vexing fjord nymph " * 50], trainer=trainer)
    for file in folder.glob("tokenizer*"):
        file.unlink()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>").save_pretrained(
        folder
    )
    with pytest.raises(CheckpointMismatch, match=r"another tokenizer than this session's model .*the same text"):
        local(str(folder), resume_from=path, lora={"rank": 4})
    with local(str(folder), resume_from=path, lora={"rank": 4}, tokenizer=str(tmp_path / "kept")) as r:
        assert r.step == 1  # the checkpoint's tokenizer, given as tokenizer=: the run goes on as saved


def test_a_checkpoint_of_an_older_rlnb_without_the_config_resumes_as_before(tmp_path):
    """A training checkpoint saved before checkpoints kept their base's config and tokenizer is checked by its
    weights' digest alone, in silence: it cannot say what changed."""
    folder = hf_models.save("llama", tmp_path / "m")
    path, _ = _saved(folder, tmp_path)
    state = torch.load(path, weights_only=True)
    assert state["base_config"]["rms_norm_eps"] == "1e-06" and len(state["base_tokenizer"]) == 32
    del state["base_config"], state["base_tokenizer"]
    torch.save(state, path)
    _set_config(folder, rms_norm_eps=0.5)
    with local(str(folder), resume_from=path) as r:
        assert r.step == 1


def test_an_inference_checkpoint_given_as_the_model_says_what_to_give(tmp_path):
    folder = hf_models.save("llama", tmp_path / "m")
    path, _ = _saved(folder, tmp_path, "inference")
    said = rf"is an rlnb inference checkpoint, not a model folder: give its merged weights, '{path / 'merged'}', as"
    with pytest.raises(ModelLoadError, match=said + r" the model, or resume from the checkpoint \(resume_from="):
        local(str(path))
    with local(str(path / "merged")) as m:  # what it said to give
        assert m.step == 0


@pytest.mark.parametrize("with_model", [True, False])
def test_a_folder_holding_a_peft_adapter_is_refused_naming_it(tmp_path, with_model):
    """Both download variants of a LoRA checkpoint in one folder: transformers attached the adapter with every base
    weight frozen, and the session failed with "the model has no trainable parameters" (with ``lora``, peft's
    "Target modules ... not found"), naming neither the folder nor the adapter."""
    folder = hf_models.save("llama", tmp_path / "m")
    path, _ = _saved(folder, tmp_path, "inference", lora={"rank": 4})
    mixed = tmp_path / "mixed"
    shutil.copytree(folder if with_model else path / "adapter", mixed)
    for file in (path / "adapter").iterdir():
        shutil.copy(file, mixed / file.name)
    beside = "beside a" if with_model else "without a"
    said = rf"^model '{mixed}' holds a peft adapter \(adapter_config\.json\) {beside} model"
    for kw in ({}, {"lora": True}):
        with pytest.raises(ModelLoadError, match=said + r".*move adapter_config\.json and the adapter's weights out"):
            local(str(mixed), **kw)
    (mixed / "adapter_config.json").unlink()
    if with_model:  # the adapter moved out: the folder's own model
        with local(str(mixed)) as m:
            assert m.step == 0


def test_an_adapter_export_names_its_base_as_the_session_shows_it(tmp_path):
    """``rlnb serve`` names its base model by the served name (``shown_name``): the adapter of an inference
    checkpoint wrote the server's folder into adapter_config.json and its model card."""
    folder = hf_models.save("llama", tmp_path / "my models" / "m")
    with local(str(folder), lora={"rank": 4}, checkpoint_dir=tmp_path / "ck") as s:
        own = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
        s.backend.engine.adapter.shown_name = "my/served"
        served = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
        s.backend.engine.adapter.shown_name = None
        again = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
    for path, named in ((own, str(folder)), (served, "my/served"), (again, str(folder))):
        config = json.loads((path / "adapter" / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == named
        card = (path / "adapter" / "README.md").read_text()
        assert " ".join(card.split()).startswith(f"--- base_model: {named} ")  # its front matter wraps a long path
        assert named == str(folder) or "my models" not in card


def test_a_resume_onto_a_config_changed_in_fields_that_change_no_logits_goes_on(tmp_path):
    """``use_cache: false`` (usual under gradient checkpointing), ``output_hidden_states``, ``output_attentions`` or
    ``architectures`` in config.json refused a resume "the same weights would compute other logits": they change what
    a forward returns beside the logits, or only metadata. A checkpoint whose record kept such a field resumes too."""
    folder = hf_models.save("llama", tmp_path / "m")
    path, at_save = _saved(folder, tmp_path)
    _set_config(folder, use_cache=False, output_hidden_states=True, output_attentions=True,
                architectures=["LlamaForCausalLM", "Other"])  # fmt: skip
    with local(str(folder), resume_from=path, threads=1) as r:
        assert r.step == 1
        assert r.forward_backward(BATCH, forward_only=True).result().loss == pytest.approx(at_save, rel=1e-5)
    state = torch.load(path, weights_only=True)
    state["base_config"] = {**state["base_config"], "use_cache": "true", "return_dict": "false"}
    torch.save(state, path)
    with local(str(folder), resume_from=path, threads=1) as r:
        assert r.step == 1
