"""A Hugging Face model's output head tied to its input embedding (GPT-2, Qwen3-0.6B), untied where a checkpoint
trained them apart, and tied again where that resume is refused."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def untie_head(model: Any, state: dict[str, torch.Tensor]) -> bool:
    """Give a model whose output head is tied to its input embedding (GPT-2) a head of its own when ``state``
    holds two different tensors for them, as a merged checkpoint does whose head LoRA trained (transformers
    loads it untied too): loading ``state`` into the tied model would copy both into its one shared tensor,
    the last one written winning. True if it untied the head."""
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or emb is None or head.weight is not emb.weight:
        return False
    given = [state[k] for k, v in model.state_dict(keep_vars=True).items() if v is emb.weight and k in state]
    if all(torch.equal(given[0], t) for t in given[1:]):  # also when the state names one of them only
        return False
    head.weight = nn.Parameter(emb.weight.detach().clone(), requires_grad=emb.weight.requires_grad)
    model.config.tie_word_embeddings = False  # nothing ties them again (tie_weights reads the config)
    return True


def tie_head(model: Any, tie_word_embeddings: object) -> None:
    """Undo ``untie_head``: the head is the input embedding's tensor again and the config's ``tie_word_embeddings``
    what it was before (a resume refused once it had untied a ``model=`` module gives it back as it was)."""
    model.get_output_embeddings().weight = model.get_input_embeddings().weight
    model.config.tie_word_embeddings = tie_word_embeddings
