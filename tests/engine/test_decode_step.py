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


@pytest.mark.slow  # transformers
@pytest.mark.parametrize("settings", [{"temperature": 0.8, "top_p": 0.9, "top_k": 20}, {"temperature": 0.0}])
def test_a_compiled_hf_sample_makes_one_compiled_call_a_decode_step(hf_dirs, monkeypatch, settings):
    """The token choice runs inside the compiled decode step's graph: one compiled call (and one guard check) a
    step, where the step and the choice were two; the first token, after the eager prefill, is chosen eagerly; the
    eager sample's tokens and log-probs. ``torch.compile`` stubbed out (compiling is slow): the calls it would get."""
    import rlnb
    from rlnb.engine import choice, sampling
    from rlnb.engine.models import compiled

    calls: list[str] = []

    def counting(fn, device):
        return lambda *args: (calls.append(fn.__name__), fn(*args))[1]

    monkeypatch.setattr(compiled, "_compiled", counting)
    monkeypatch.setattr(compiled, "_SEEN", set())
    monkeypatch.setattr(compiled, "_EAGER", set())
    cpu, cfg = torch.device("cpu"), sampling.Settings(max_tokens=12, **settings)
    with rlnb.connect("local", model=hf_dirs["qwen3"], seed=1, device="cpu", record=False) as s, torch.no_grad():
        adapter, model, compiler = s.backend.adapter, s.backend.sampler, compiled.Compiler(cpu)
        prompts = [list(range(5, 10)), list(range(5, 40))]
        chooser = choice.compiled_pick(compiler, cfg, torch.float32, 6, adapter.vocab_size, cpu)
        got = sampling.generate(
            adapter.decoder(model, 6, 64, compiler), prompts, 3, cfg, 5, adapter.codec, cpu, chooser
        )
        want = sampling.generate(adapter.decoder(model, 6, 64), prompts, 3, cfg, 5, adapter.codec, cpu)
    assert [[q.tokens for q in g] for g in got] == [[q.tokens for q in g] for g in want]
    lps = [torch.tensor([lp for g in groups for q in g for lp in q.logprobs]) for groups in (got, want)]
    torch.testing.assert_close(*lps, atol=1e-5, rtol=0)
    assert calls == ["hf_step_choice"] * 11  # 12 tokens: the first after the prefill, then 11 decode steps
    greedy, nucleus = cfg.temperature < choice.MIN_TEMPERATURE, cfg.top_p < 1
    kind = {"greedy": greedy, "nucleus": nucleus, "top_k": cfg.top_k if cfg.top_k > 0 else -1}
    assert compiler.compiles == [{"what": "decode step", "batch": 6, "length": 64, "window": 64, **kind,
                                  "seconds": compiler.compiles[0]["seconds"]}]  # fmt: skip
