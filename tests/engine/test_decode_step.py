"""The compiled transformers decode step's parts: ``DECODE_ATTENTION``'s fallback to transformers' ``sdpa``."""

import builtins

import pytest
import torch

SDPA_MODULE = "transformers.integrations.sdpa_attention"


@pytest.mark.slow  # imports transformers
def test_decode_attention_imports_transformers_sdpa_once_not_at_every_call(monkeypatch):
    """A query of several tokens (a prefill) goes to transformers' ``sdpa_attention_forward``, found once: an import
    statement inside the function ran at every layer of every prefill."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from rlnb.engine.models.decoders import decode_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 3, 8, generator=g) for _ in "qkv")
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 1, True
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.3)
    decode_attention(module, q, k, v, None, scaling=0.3)  # the first call may import it
    imported: list[str] = []
    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **kw: (imported.append(name), real(name, *a, **kw))[1])
    got = [decode_attention(module, q, k, v, None, scaling=0.3)[0] for _ in range(3)]
    monkeypatch.undo()
    assert SDPA_MODULE not in imported
    for out in got:
        torch.testing.assert_close(out, want)
