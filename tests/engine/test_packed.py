"""Prepacked sampler weights: which layers are packed, that they compute what ``nn.Linear`` does, that a weight
written in place is re-packed before it is used, and what a session's sampler holds."""

import gc
from copy import deepcopy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import rlnb
from rlnb import samples
from rlnb.engine.models import packed
from rlnb.engine.models.packed import PackedLinear

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

        s.forward_backward([samples.cross_entropy(list(range(1, 40)))])
        s.optim_step(rlnb.AdamParams(learning_rate=3e-3)).result()  # moderate logits: float32 rounding stays ~1e-5
        q = sample()  # not synced yet: the sampler still has the start weights
        assert q.logprobs == pytest.approx(logprobs(initial, q.tokens), abs=1e-4)
        s.weights_sync().result()
        q = sample()
        assert q.logprobs == pytest.approx(logprobs(s.backend.trainer, q.tokens), abs=1e-4)
        assert q.logprobs != pytest.approx(logprobs(initial, q.tokens), abs=1e-2)  # the step changed them


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
