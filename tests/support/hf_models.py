"""Tiny Hugging Face models and a tokenizer, built from configs at test time (no hub, no network).

Each is saved with ``save_pretrained`` to a folder and loaded back through the same path a user's local
directory takes (``rlnb.connect("local", model="/path/to/dir")``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import rlnb

VOCAB = 320  # model rows; the tokenizer below has fewer tokens (padded vocabularies are normal)
HIDDEN = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)
_WORDS = (
    "the model answers in digits when the reward asks for numbers and the loss goes down as the policy learns "
    "a notebook drives a training session one operation at a time sample forward backward optim step sync "
)


def corpus() -> list[str]:
    """A few KB of text with words, digits and punctuation."""
    lines = []
    for i in range(120):
        words = _WORDS.split()
        lines.append(" ".join(words[(i * 7 + k) % len(words)] for k in range(12)) + f" {i * 37 % 1000}. n={i}!")
    return lines


def build_tokenizer(folder: Path):
    """A byte-level BPE tokenizer (~300 tokens) with <pad>=0, <s>=1, </s>=2 and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", padding_side="left"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def build_model(arch: str, seed: int = 0, **config):
    """A randomly initialised tiny causal LM of ``arch`` ("gpt2", "llama", "qwen3"), hidden 64, 2 layers; ``config``
    sets more of its config's fields (``tie_word_embeddings=True``: a head tied to the embedding, as Qwen3-0.6B's)."""
    import transformers as tf

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if arch == "gpt2":
            gpt2 = dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256)
            model = tf.GPT2LMHeadModel(tf.GPT2Config(**gpt2, bos_token_id=1, eos_token_id=2, **config))
        elif arch == "llama":
            model = tf.LlamaForCausalLM(tf.LlamaConfig(**HIDDEN, bos_token_id=1, eos_token_id=2, **config))
        elif arch == "qwen3":
            model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**HIDDEN, head_dim=16, bos_token_id=1, eos_token_id=2, **config))
        else:
            raise ValueError(arch)
    return model


def save(arch: str, folder: Path, with_tokenizer: bool = True, seed: int = 0, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    build_model(arch, seed, **config).save_pretrained(folder)
    if with_tokenizer:
        build_tokenizer(folder)
    return folder


def local(model, **kw):
    """An in-process session of ``model`` on the CPU, recording nothing, unless ``kw`` says otherwise."""
    kw.setdefault("device", "cpu")
    kw.setdefault("record", False)
    return rlnb.connect("local", model=model, **kw)


def crafted(folder: Path, change) -> Path:
    """A GPT-2 model folder saved to ``folder``, then damaged by ``change(folder)``."""
    save("gpt2", folder)
    change(folder)
    return folder


def config_with(**fields):
    """A change for ``crafted`` that sets ``fields`` in the folder's config.json."""

    def change(folder):
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **fields}))

    return change


def drop_weights(folder, part):
    """The folder's weights less those whose name holds ``part``."""
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    kept = {k: v for k, v in state.items() if part not in k}
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})


CUSTOM_CODE = """
import os
import pathlib
from transformers import GPT2Config, GPT2LMHeadModel

pathlib.Path(os.environ["RLNB_TEST_MARKER"]).write_text("the folder's code ran")  # closed: no ResourceWarning


class CustomConfig(GPT2Config):
    model_type = "rlnb-custom-gpt2"


class CustomLM(GPT2LMHeadModel):
    config_class = CustomConfig
"""


def with_own_code(folder: Path) -> Path:
    """A tiny GPT-2 folder whose config maps its classes to a module in the folder (auto_map)."""
    save("gpt2", folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(
        model_type="rlnb-custom-gpt2",
        auto_map={"AutoConfig": "custom.CustomConfig", "AutoModelForCausalLM": "custom.CustomLM"},
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "custom.py").write_text(CUSTOM_CODE)
    return folder
