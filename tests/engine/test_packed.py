"""Prepacked sampler weights: which layers are packed, that they compute what ``nn.Linear`` does (a gated MLP's
``gate`` and ``up`` as one packed pair), that a weight written in place is re-packed before it is used, and what a
session's sampler holds."""

import gc
from copy import deepcopy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import rlnb
from rlnb import samples
from rlnb.engine.models import packed
from rlnb.engine.models.packed import PackedGatedMLP, PackedLinear
from tests.support.calls import python_calls

pytestmark = pytest.mark.skipif(not packed.available(torch.device("cpu")), reason="torch built without oneDNN")


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


class Head(nn.Module):
    """Token ids to logits through a large linear layer (``plain`` modules sample by recompute)."""

    def __init__(self, vocab: int = 600, width: int = 512) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.small = nn.Linear(width, 64)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(h + self.small(h).sum(-1, keepdim=True))


def test_only_large_float32_layers_are_packed_and_the_state_dict_is_unchanged():
    m = Head()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    half = nn.Linear(512, 600).to(torch.bfloat16)
    assert packed.pack(m) == 1 and packed.pack(half) == 0
    assert type(m.head) is PackedLinear and type(m.small) is nn.Linear and type(half) is nn.Linear
    assert m.state_dict().keys() == before.keys()
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())


def test_a_packed_layer_computes_what_linear_does_and_follows_in_place_writes():
    lin = nn.Linear(512, 1024)
    x = torch.randn(16, 1, 512)
    ref = nn.Linear(512, 1024)
    ref.load_state_dict(lin.state_dict())
    packed.pack(lin)
    with torch.no_grad():
        before = lin(x)
        close(before, ref(x))
        new = torch.randn(1024, 512)
        lin.weight.copy_(new)  # as weights-sync writes it
        ref.weight.copy_(new)
        close(lin(x), ref(x))
        assert not torch.allclose(lin(x), before, atol=1e-2)  # the new weight, not the packed copy of the old


def test_refresh_repacks_what_changed_for_a_compiled_caller():
    lin = nn.Linear(512, 512)
    packed.pack(lin)
    old = packed._PACKED[id(lin)]
    packed.refresh(lin)
    assert packed._PACKED[id(lin)] is old  # nothing written since: nothing re-packed
    with torch.no_grad():
        lin.weight.mul_(2)
    packed.refresh(lin)
    assert packed._PACKED[id(lin)] is not old and lin.packed_version == lin.weight._version


def test_a_dropped_layer_frees_its_packed_weight_and_a_copy_packs_its_own():
    lin = nn.Linear(512, 512)
    packed.pack(lin)
    copy = deepcopy(lin)
    x = torch.randn(4, 512)
    with torch.no_grad():
        copy.weight.mul_(-1)
        close(copy(x), -lin(x) + 2 * lin.bias)  # the copy's own (negated) weight, not the original's
        close(lin(x), F.linear(x, lin.weight, lin.bias))
    key = id(lin)
    assert key in packed._PACKED
    del lin
    gc.collect()
    assert key not in packed._PACKED
    with torch.no_grad():
        close(copy(x), F.linear(x, copy.weight, copy.bias))


def _trains_then_syncs(s, sample, logprobs, initial, tol: float):
    """One step trained, then synced: the sampler keeps ``initial``'s log-probs (to ``tol``) until the weights-sync and
    has the trainer's after it, which the step changed (by more than ``100 * tol``). The synced sample."""
    s.forward_backward([samples.cross_entropy(list(range(1, 40)))])
    s.optim_step(rlnb.AdamParams(learning_rate=3e-3)).result()  # moderate logits: float32 rounding stays ~1e-5
    q = sample()  # not synced yet: the sampler still has the start weights
    assert q.logprobs == pytest.approx(logprobs(initial, q.tokens), abs=tol)
    s.weights_sync().result()
    q = sample()
    assert q.logprobs == pytest.approx(logprobs(s.backend.trainer, q.tokens), abs=tol)
    assert q.logprobs != pytest.approx(logprobs(initial, q.tokens), abs=100 * tol)  # the step changed them
    return q


def test_a_session_samples_with_the_trained_weights_only_after_weights_sync():
    model = Head()
    prompt = [5, 6, 7]

    def logprobs(module, tokens):
        with torch.no_grad():
            lp = torch.log_softmax(module(torch.tensor([prompt + tokens]))[0, len(prompt) - 1 : -1], -1)
        return [float(lp[i, t]) for i, t in enumerate(tokens)]

    with rlnb.connect("local", model=model, device="cpu", seed=0, record=False) as s:
        assert type(s.backend.sampler.head) is PackedLinear and type(s.backend.trainer.head) is nn.Linear
        initial = Head()
        initial.load_state_dict(s.backend.trainer.state_dict())

        def sample():
            return s.sample([prompt], num_samples=1, max_tokens=4, seed=3).result().results[0].sequences[0]

        _trains_then_syncs(s, sample, logprobs, initial, 1e-4)


@pytest.mark.slow
def test_a_lora_sampler_is_not_packed():
    model = Head()
    with rlnb.connect("local", model=model, device="cpu", record=False, lora={"rank": 4}) as s:
        assert not any(isinstance(m, PackedLinear) for m in s.backend.sampler.modules())


@pytest.mark.slow
def test_the_compiled_step_runs_the_packed_product_and_follows_refresh():
    lin = nn.Linear(512, 512)
    ref = nn.Linear(512, 512)
    ref.load_state_dict(lin.state_dict())
    packed.pack(lin)
    packed.refresh(lin)  # as the sample handler does before each compiled sample
    step = torch.compile(lambda x: torch.relu(lin(x)), dynamic=False)
    x = torch.randn(16, 1, 512)
    with torch.no_grad():
        assert torch.equal(step(x), torch.relu(lin(x)))  # the same kernel as eager
        close(step(x), torch.relu(ref(x)))
        new = torch.randn(512, 512)
        lin.weight.copy_(new)
        ref.weight.copy_(new)
        packed.refresh(lin)  # what the sample handler does before the compiled step runs
        close(step(x), torch.relu(ref(x)))


class Gated(nn.Module):
    """A gated MLP as Llama's and Qwen's (``swap``: another formula over the same layers)."""

    def __init__(self, width: int = 256, inner: int = 512, swap: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(width, inner, bias=False)
        self.up_proj = nn.Linear(width, inner, bias=False)
        self.down_proj = nn.Linear(inner, width, bias=False)
        self.act_fn = nn.SiLU()
        self.swap = swap

    def forward(self, x):
        a, b = (self.up_proj, self.gate_proj) if self.swap else (self.gate_proj, self.up_proj)
        return self.down_proj(self.act_fn(a(x)) * b(x))


def test_a_gated_mlp_multiplies_by_gate_and_up_as_one_packed_product_and_follows_in_place_writes():
    m = Gated()
    ref = deepcopy(m)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    x = torch.randn(16, 1, 256)
    assert packed.pack(m) == 1  # one pair (131,072 weights each: neither alone is packed)
    assert isinstance(m, PackedGatedMLP) and isinstance(m, Gated) and type(m.gate_proj) is nn.Linear
    assert m.state_dict().keys() == before.keys() and len(list(m.parameters())) == 3  # weights-sync zips these
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    with torch.no_grad():
        first = m(x)
        close(first, ref(x))
        for name in ("up_proj", "gate_proj"):  # either weight, written as weights-sync writes it
            new = torch.randn(512, 256) / 16
            getattr(m, name).weight.copy_(new)
            getattr(ref, name).weight.copy_(new)
            close(m(x), ref(x))
        assert not torch.allclose(m(x), first, atol=1e-2)
        x64 = x.to(torch.float64)
        close(m.double()(x64), ref.double()(x64))  # another dtype: the model's own forward


def test_guard_an_mlp_of_another_formula_keeps_its_class_and_its_layers_are_packed_apart():
    m = Gated(width=512, swap=True)
    ref = deepcopy(m)
    assert packed.pack(m) == 3
    assert type(m) is Gated and all(type(x) is PackedLinear for x in (m.gate_proj, m.up_proj, m.down_proj))
    assert id(m) not in packed._PACKED
    x = torch.randn(4, 512)
    with torch.no_grad():
        close(m(x), ref(x))


class Scaled(Gated):
    """A gated MLP whose forward takes a second argument."""

    def forward(self, x, scale):
        return super().forward(x) * scale


def test_an_mlp_whose_forward_takes_more_than_the_rows_keeps_its_class():
    m = Scaled()
    assert packed.pack(m) == 0 and type(m) is Scaled and id(m) not in packed._PACKED
    x = torch.randn(4, 256)
    with torch.no_grad():
        close(m(x, 2.0), Gated.forward(m, x) * 2)


def test_refresh_repacks_a_pair_when_either_weight_was_written():
    m = Gated()
    packed.pack(m)
    old = packed._PACKED[id(m)]
    packed.refresh(m)
    assert packed._PACKED[id(m)] is old
    for layer in (m.gate_proj, m.up_proj):
        with torch.no_grad():
            layer.weight.mul_(2)
        packed.refresh(m)
        assert packed._PACKED[id(m)] is not old and not m.stale()
        old = packed._PACKED[id(m)]


@pytest.mark.slow
def test_the_compiled_step_runs_the_packed_pair_and_follows_refresh():
    m = Gated()
    ref = deepcopy(m)
    assert packed.pack(m) == 1 and isinstance(m, PackedGatedMLP)
    packed.refresh(m)  # as the sample handler does before each compiled sample
    step = torch.compile(lambda x: m(x) * 2, dynamic=False)
    x = torch.randn(16, 1, 256)
    with torch.no_grad():
        assert torch.equal(step(x), m(x) * 2)  # the same kernel as eager
        new = torch.randn(512, 256) / 16
        m.up_proj.weight.copy_(new)
        ref.up_proj.weight.copy_(new)
        packed.refresh(m)
        close(step(x), ref(x) * 2)


def qwen3_pairs():
    """A one-layer Qwen3 whose MLP's gate and up (256 x 512 each) make one packed pair."""
    import transformers as tf

    torch.manual_seed(0)
    config = tf.Qwen3Config(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=64, eos_token_id=None)  # fmt: skip
    return tf.Qwen3ForCausalLM(config)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_qwen3_sampler_pairs_its_mlps_and_samples_the_synced_weights_eager_or_compiled(transformers):
    """Sampled log-probs are those of the trainer's unpacked forward: the start weights until weights-sync, the
    trained ones after; compiled, the eager tokens and log-probs to 1e-5."""
    prompt = [5, 6, 7]

    def logprobs(module, tokens):
        with torch.no_grad():
            logits = module(input_ids=torch.tensor([prompt + tokens])).logits
        lp = torch.log_softmax(logits[0, len(prompt) - 1 : -1], -1)
        return [float(lp[i, t]) for i, t in enumerate(tokens)]

    runs = {}
    for compile_ in (False, True):
        with rlnb.connect("local", model=qwen3_pairs(), device="cpu", seed=0, record=False, compile=compile_) as s:
            assert isinstance(s.backend.sampler.model.layers[0].mlp, PackedGatedMLP)
            assert not isinstance(s.backend.trainer.model.layers[0].mlp, PackedGatedMLP)
            initial = deepcopy(s.backend.trainer)

            def sample():
                return s.sample([prompt], num_samples=1, max_tokens=8, seed=3).result().results[0].sequences[0]

            first = sample()
            assert first.logprobs == pytest.approx(logprobs(initial, first.tokens), abs=1e-5)
            q = _trains_then_syncs(s, sample, logprobs, initial, 1e-5)
            runs[compile_] = (first, q)
    for got, want in zip(runs[True], runs[False], strict=True):
        assert got.tokens == want.tokens
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)


def test_a_packed_product_as_the_compiled_step_calls_it_runs_one_python_function():
    """The compiled step calls ``rlnb::packed_linear`` and ``rlnb::packed_pair`` through the dispatcher at every token:
    the kernel is the only Python on that path (``torch.library.custom_op`` added 8 and 9 Python calls a product,
    its autograd wrapper, alias check and redispatch: ~45 a decode step of the 3m Qwen3)."""
    lin, pair = nn.Linear(512, 512, bias=False), Gated(width=512, inner=512)
    packed.pack(lin)
    packed.pack(pair)
    assert isinstance(pair, PackedGatedMLP)
    x = torch.randn(16, 512)
    with torch.no_grad():
        packed.refresh(pair)
        both = torch.ops.rlnb.packed_pair.default(x, pair.gate_proj.weight, pair.up_proj.weight, 0)
        close(both, x @ torch.cat([pair.gate_proj.weight, pair.up_proj.weight]).T)
        g, u = pair.gate_proj.weight, pair.up_proj.weight
        two = python_calls(lambda: torch.ops.rlnb.packed_pair.default(x, g, u, 0))
        with pytest.raises(RuntimeError, match="another model's"):
            torch.ops.rlnb.packed_linear.default(x, lin.weight, None, 0)  # no refresh(lin): pair's is named
        packed.refresh(lin)
        close(torch.ops.rlnb.packed_linear.default(x, lin.weight, None, 0), x @ lin.weight.T)
        w = lin.weight
        one = python_calls(lambda: torch.ops.rlnb.packed_linear.default(x, w, None, 0))
    assert (one, two) == (4, 4)  # the lambda, the op's __call__, the kernel and its oneDNN op's __call__


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_second_session_of_one_packed_architecture_samples_with_the_compiled_step_it_has(transformers):
    """The compiled step finds a packed layer's copy by the layer's place in the model, not its ``id``: a layer's
    ``id`` was a constant of the graph, so each new session's model compiled the decode step again (~5.5 s for bench
    (a)'s 3m Qwen3, unrecorded in ``compiles``), and from torch's ninth graph ran it eager. Two sessions at once
    sample their own weights."""
    from torch._dynamo.utils import counters

    def sample(s):
        return s.sample([[5, 6, 7]], num_samples=2, max_tokens=8, temperature=0.0).result().results[0].sequences[0]

    first = rlnb.connect("local", model=qwen3_pairs(), device="cpu", seed=0, record=False, compile=True, threads=1)
    want = sample(first)
    graphs = counters["stats"]["unique_graphs"]
    torch.manual_seed(1)
    other = qwen3_pairs()  # another model of the same architecture, other weights
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    second = rlnb.connect("local", model=other, device="cpu", seed=0, record=False, compile=True, threads=1)
    got = sample(second)
    assert counters["stats"]["unique_graphs"] == graphs, "the second session's model compiled the step again"
    assert sample(first).tokens == want.tokens  # each session its own packed copies, both open
    assert got.tokens != want.tokens
    eager = rlnb.connect("local", model=deepcopy(other), device="cpu", seed=0, record=False)
    assert sample(eager).logprobs == pytest.approx(got.logprobs, abs=1e-5)
    for s in (first, second, eager):
        s.close()
