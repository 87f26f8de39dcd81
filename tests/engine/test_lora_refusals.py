"""LoRA's refusals of ``lora=`` and ``model=``: each an ``OptionRefused`` naming its option where it is raised, so a
front end names its own spelling of the option (``rlnb demo --lora``) whoever calls the check; peft's own refusal of
a layer it cannot adapt reaches the user as a refusal of ``lora=`` in peft's words."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rlnb
from rlnb.engine.models.lora import LoraSettings, apply_lora, refuse_adapted
from rlnb.engine.models.tiny import build_model
from rlnb.errors import OptionRefused

pytestmark = pytest.mark.usefixtures("peft", "transformers")  # Hugging Face: slow, skipped without them


class Conv1D(nn.Module):
    """A layer of one's own named as GPT-2's: LoRA's targets take it for transformers' Conv1D, peft refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class _OwnConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.conv, self.head = nn.Embedding(32, 8), Conv1D(), nn.Linear(8, 32)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(self.emb(idx)))


def _targets(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]


def test_the_lora_checks_raise_a_refusal_of_their_option_themselves():
    """Seen failing first: each raised a bare ``ValueError``, turned into ``OptionRefused`` only by a wrapper around
    ``rlnb.connect``'s calls, so another caller of the check got no field to name."""
    model = build_model("tiny", seed=0)
    with pytest.raises(OptionRefused, match=r"^lora: rank 100000 is more than any adapted layer can use") as big:
        apply_lora(model, _targets(model), LoraSettings(rank=100_000))
    with pytest.raises(OptionRefused, match=r"^lora: model \(TinyTransformer\) has no linear layer") as none:
        apply_lora(model, [], LoraSettings(rank=2))
    apply_lora(model, _targets(model), LoraSettings(rank=2))
    with pytest.raises(OptionRefused, match=r"^model \(TinyTransformer\) was adapted in place") as adapted:
        refuse_adapted(model)
    assert (big.value.field, none.value.field, adapted.value.field) == ("lora", "lora", "model")


def test_a_layer_peft_cannot_adapt_is_a_refusal_of_lora_in_peft_words_and_leaves_the_module_as_it_was():
    """Kept as a guard: peft's ``ValueError`` for a target it does not support reaches the user as the refusal of
    ``lora=``, not an error of the session, and the ``model=`` module still trains without LoRA."""
    model = _OwnConv()
    with pytest.raises(OptionRefused, match=r"Target module Conv1D\(\) is not supported") as refused:
        rlnb.connect("local", model=model, lora={"rank": 2}, device="cpu", record=False)
    assert refused.value.field == "lora"
    with rlnb.connect("local", model=model, device="cpu", record=False) as s:
        assert all(p.requires_grad for p in s.backend.trainer.parameters())
