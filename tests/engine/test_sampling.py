"""The sampler draws from the distribution it claims: temperature, top-k, top-p, untempered log-probs,
and seeds that make a prompt's completions independent of the rest of the batch."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import rlnb

LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0])
V = len(LOGITS)


class Fixed(nn.Module):
    """The same next-token logits after any prefix."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(LOGITS.clone())
        self.block_size = 64

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.bias.expand(*idx.shape, V)


def draw(s, n_prompts=8, **kw) -> torch.Tensor:
    out = s.sample([[i % V] for i in range(n_prompts)], num_samples=256, max_tokens=1, seed=0, **kw).result()
    return torch.tensor([q.tokens[0] for r in out.results for q in r.sequences])


def frequencies(tokens: torch.Tensor) -> torch.Tensor:
    return torch.bincount(tokens, minlength=V).float() / len(tokens)


def expected(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, -1)


@pytest.fixture
def s():
    with rlnb.connect("local", model=Fixed(), device="cpu", record=False) as session:
        yield session


def test_temperature_matches_the_softmax(s):
    for t in (1.0, 0.5, 2.0):
        got = frequencies(draw(s, temperature=t))
        assert (got - expected(LOGITS / t)).abs().max() < 0.04, t  # 2048 draws: 4 standard deviations


def test_top_k_keeps_only_the_k_most_likely(s):
    got = frequencies(draw(s, top_k=3))
    assert got[3:].sum() == 0
    assert (got[:3] - expected(LOGITS[:3])).abs().max() < 0.04


def test_top_p_keeps_the_smallest_prefix_reaching_p(s):
    probs = expected(LOGITS)
    keep = int((probs.cumsum(0) - probs < 0.6).sum())  # tokens whose preceding mass is below p
    got = frequencies(draw(s, top_p=0.6))
    assert got[keep:].sum() == 0
    assert (got[:keep] - expected(LOGITS[:keep])).abs().max() < 0.04


def test_logprobs_are_the_untempered_models(s):
    out = s.sample([[1]], num_samples=16, max_tokens=3, temperature=2.0, seed=1).result()
    lp = torch.log_softmax(LOGITS, -1)
    for q in out.results[0].sequences:
        for tok, got in zip(q.tokens, q.logprobs, strict=True):
            assert got == pytest.approx(float(lp[tok]), abs=1e-6)


def test_a_prompts_completions_do_not_depend_on_the_rest_of_the_batch():
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as t:
        alone = t.sample([b"n=".decode()], num_samples=4, max_tokens=12, seed=9).result().results[0]
        shared = t.sample(["n=", "a much longer prompt"], num_samples=4, max_tokens=12, seed=9).result().results[0]
        shorter = t.sample("n=", num_samples=4, max_tokens=5, seed=9).result().results[0]
    assert [q.tokens for q in alone.sequences] == [q.tokens for q in shared.sequences]
    assert [q.tokens[:5] for q in alone.sequences] == [q.tokens for q in shorter.sequences]
    assert len({tuple(q.tokens) for q in alone.sequences}) > 1  # the samples of one prompt differ


def test_greedy_is_the_argmax(s):
    tokens = draw(s, n_prompts=1, temperature=0)
    assert set(tokens.tolist()) == {int(LOGITS.argmax())}
    assert math.isclose(float(frequencies(tokens)[0]), 1.0)


def test_top_p_at_an_exact_tie_keeps_only_the_prefix_that_reaches_it():
    """Probabilities [0.5, 0.25, 0.25]: top_p=0.5 is reached by the first token alone (as Hugging Face's
    top-p warper keeps it); 0.75 by the first two."""
    from rlnb.engine.choice import choose

    logits = torch.tensor([[math.log(2.0), 0.0, 0.0]]).expand(400, 3)
    u = torch.linspace(0.0, 0.999, 400)[:, None]
    for top_p, kept in ((0.5, {0}), (0.75, {0, 1}), (0.8, {0, 1, 2})):
        tokens = choose(logits, 1.0, top_p, -1, u, greedy=False, nucleus=True)
        assert set(tokens[:, 0].tolist()) == kept, top_p


def test_prompts_as_a_generator_or_arrays_are_all_sampled():
    """A generator is read whole (testing its first item used to drop it), and an array or tensor of ids is a
    prompt like the list of its ids."""
    import numpy as np

    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as t:
        listed = t.sample(["a>", "bb>", "ccc>"], max_tokens=3, seed=1).result().results
        generated = t.sample((w for w in ["a>", "bb>", "ccc>"]), max_tokens=3, seed=1).result().results
        ids = list(b"bb>")
        as_list = t.sample([ids], max_tokens=3, seed=2).result().results
        as_arrays = t.sample([np.array(ids), torch.tensor(ids)], max_tokens=3, seed=2).result().results
        one_array = t.sample(np.array(ids), max_tokens=3, seed=2).result().results
    assert [r.sequences[0].tokens for r in generated] == [r.sequences[0].tokens for r in listed]
    assert len(as_arrays) == 2 and len(one_array) == 1
    assert as_arrays[0].sequences[0].tokens == as_list[0].sequences[0].tokens == one_array[0].sequences[0].tokens


def test_sampling_params_are_named_before_the_prompts_are_measured():
    """``max_tokens="8"`` used to raise a bare ``TypeError`` from the context check."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as t:
        for kwargs, field in (({"max_tokens": "8"}, "max_tokens"), ({"top_p": 2.0}, "top_p")):
            with pytest.raises(ValueError, match=rf"^SamplingParams\.{field} = .* is invalid: must be "):
                t.sample("n=", **kwargs)
        with pytest.raises(ValueError, match=r"^seed must be None or an integer in \[-9223372036854775808, "):
            t.sample("n=", seed=1.5)  # checked as every int64 is, before the wire model
        assert len(t.history) == 0


def test_a_top_p_below_float32s_smallest_keeps_the_most_likely_token(s):
    """top_p=1e-300 (> 0, so valid) is 0 in float32: every token was dropped, the CDF was NaN and every row drew
    the last token of the vocabulary."""
    from rlnb.engine.choice import choose

    logits = LOGITS[None].expand(64, V)
    u = torch.linspace(0.0, 0.999, 64)[:, None]
    for top_p in (1e-300, 1e-46, torch.tensor(1e-300)):
        assert set(choose(logits, 1.0, top_p, -1, u, greedy=False, nucleus=True)[:, 0].tolist()) == {0}, top_p
    assert set(draw(s, n_prompts=1, top_p=1e-300).tolist()) == {int(LOGITS.argmax())}


class Hungry(Fixed):
    """Asks torch for memory no machine has once the batch is wider than 8 rows (a sample too big for the CPU)."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.shape[0] > 8:
            torch.empty(2**50, dtype=torch.uint8)  # torch's CPU allocator fails at once: nothing is touched
        return super().forward(idx)


def test_a_sample_past_the_cpus_memory_is_resource_exhausted_and_the_session_samples_on():
    """torch's CPU allocator fails with a ``RuntimeError`` (``DefaultCPUAllocator: can't allocate memory``), not the
    CUDA ``OutOfMemoryError``: the operation failed ``INTERNAL_ERROR`` where the engine says out of memory is
    ``RESOURCE_EXHAUSTED``."""
    with rlnb.connect("local", model=Hungry(), device="cpu", record=False) as s:
        with pytest.raises(rlnb.OperationFailed) as failed:
            s.sample([[1]], num_samples=16, max_tokens=2).result()
        assert failed.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
        assert failed.value.message.startswith("out of memory: ") and "can't allocate memory" in failed.value.message
        assert len(s.sample([[1]], num_samples=8, max_tokens=2).result().results[0].sequences) == 8


def test_distinct_int64_seeds_draw_distinct_samples_and_a_seed_past_int64_is_refused():
    """The handler seeded torch with ``seed % 2**63``, and torch's CPU generator reads 32 bits of a seed: -1 sampled
    what 2**63 - 1 did, -2**63 what 0 did, and 7 + 2**32 what 7 did."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as t:

        def tokens(seed: int) -> list[list[int]]:
            out = t.sample("n=", num_samples=4, max_tokens=12, seed=seed).result()
            return [q.tokens for q in out.results[0].sequences]

        assert tokens(-1) != tokens(2**63 - 1)
        assert tokens(-(2**63)) != tokens(0)
        assert tokens(7 + 2**32) != tokens(7)
        assert tokens(-1) == tokens(-1)  # still a seed: the same one draws the same tokens
        for seed in (2**63, -(2**63) - 1):
            with pytest.raises(ValueError, match=rf"seed must be None or an integer in \[-9223372036854775808, "
                                                 rf"9223372036854775807\], got {seed}$"):  # fmt: skip
                t.sample("n=", max_tokens=2, seed=seed)


def test_top_k_zero_or_past_the_vocabulary_is_off_and_below_minus_one_is_refused(s):
    """-1 is the API's off; 0 is off too (as vLLM takes it; it was so here, and said nowhere), as is a k >= V."""
    off = draw(s, n_prompts=2).tolist()
    for k in (None, -1, 0, V, 10**6):
        assert draw(s, n_prompts=2, top_k=k).tolist() == off, k
    assert draw(s, n_prompts=2, top_k=1).tolist() != off
    before = len(s.history)
    for k in (-2, -(2**40)):
        with pytest.raises(ValueError, match=r"^SamplingParams\.top_k = -\d+ is invalid: must be an integer .* >= -1 "):
            s.sample([[1]], max_tokens=1, top_k=k)
    assert len(s.history) == before


def test_a_sample_whose_kv_cache_would_not_fit_the_free_memory_is_refused_before_it_is_allocated(monkeypatch):
    """The engine had no bound: prompts x num_samples x (prompt + max_tokens) took what memory there was, and failed
    only once allocated or filled (or, where Linux overcommits, the process was killed)."""
    from rlnb.engine import memory

    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as t:
        per_token = t.backend.engine.adapter.kv_bytes_per_token()
        assert per_token > 0
        monkeypatch.setattr(memory, "free_memory", lambda device: 100 * 20 * per_token)  # room for 100 rows x 20
        with pytest.raises(rlnb.OperationFailed) as failed:
            t.sample(["n=", "ab"], num_samples=64, max_tokens=18).result()
        assert failed.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
        assert f"(128 rows (prompts x num_samples) x 20 tokens (longest prompt + max_tokens) x {per_token} bytes, " \
               "and its prefill: 2 prompts x 2 tokens (the longest prompt) x " in failed.value.message  # fmt: skip
        assert "GiB free on cpu: sample fewer prompts, num_samples or max_tokens at once" in failed.value.message
        assert len(t.sample("n=", num_samples=64, max_tokens=18).result().results[0].sequences) == 64


def test_the_apis_int32_sampling_fields_refuse_what_int32_cannot_hold(s):
    """``top_k=2**31`` was sent (a remote session knows no vocabulary), where the API's plain integers are int32."""
    import rlnb.wire as wire

    with pytest.raises(ValueError, match=r"^SamplingParams\.top_k = 2147483648 is invalid: .* and <= 2147483647;"):
        s.sample([[1]], max_tokens=1, top_k=2**31)
    for body, field in (({"sampling_params": {"max_tokens": 2**31}}, "sampling_params.max_tokens"),
                        ({"num_samples": 2**31}, "num_samples")):  # fmt: skip  # locally, context and 256 come first
        with pytest.raises(ValueError, match=rf"\n{field}\n  Input should be less than or equal to 2147483647"):
            wire.SampleBody.model_validate({"model_inputs": [], **body})
    assert draw(s, n_prompts=1, top_k=2**31 - 1).tolist() == draw(s, n_prompts=1).tolist()  # the largest: off


class Masked(Fixed):
    """Token 0's logit is -inf: the model never gives it (a masked token)."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return super().forward(idx).index_fill(-1, torch.tensor([0]), -math.inf)


def test_a_temperature_past_float32_spreads_over_the_unmasked_tokens_not_the_last_one():
    """``temperature=1e39`` is inf in float32, and -inf / inf is NaN: every row drew token V - 1, silently."""
    with rlnb.connect("local", model=Masked(), device="cpu", record=False) as m:
        for t in (1e39, 1e300):
            got = frequencies(draw(m, n_prompts=1, temperature=t))
            assert got[0] == 0 and got[1:].min() > 0.08, (t, got)  # uniform over the 7 others: 1/7 each


def fake_host(monkeypatch, tmp_path, available_gib: float, own: str, cgroups: dict[str, dict[str, str]]):
    """Point the memory reader at ``tmp_path``: ``/proc/meminfo`` with ``available_gib``, ``/proc/self/cgroup`` holding
    ``own``, and each cgroup folder (relative to the mount) with its files."""
    from rlnb.engine import memory

    (tmp_path / "fs").mkdir(parents=True)
    (tmp_path / "meminfo").write_text(f"MemTotal: 67108864 kB\nMemAvailable: {int(available_gib * 2**20)} kB\n")
    (tmp_path / "self-cgroup").write_text(own)
    for folder, files in cgroups.items():
        (tmp_path / "fs" / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (tmp_path / "fs" / folder / name).write_text(text)
    monkeypatch.setattr(memory, "MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(memory, "PROC_CGROUP", tmp_path / "self-cgroup")
    monkeypatch.setattr(memory, "CGROUP", tmp_path / "fs")
    return memory.free_memory(torch.device("cpu"))


GiB = 2**30


def test_the_kv_cache_check_takes_a_containers_memory_limit_not_only_the_hosts_memavailable(monkeypatch, tmp_path):
    """The check read ``MemAvailable`` alone, the host's: in a container limited to 4 GiB on a 64 GiB host, a cache
    of 10 GiB passed it, and the kernel killed the process. Now the cgroup's limit - usage (+ the file cache it
    reclaims first) bounds it too: v2 (``memory.max``), v1 (``memory.limit_in_bytes``), and every cgroup above the
    process's own; ``max`` (v2) is no limit."""
    v2 = {"": {"memory.max": f"{4 * GiB}\n", "memory.current": f"{GiB + GiB // 2}\n",
               "memory.stat": f"anon 1\ninactive_file {GiB // 2}\nactive_file 7\n"}}  # fmt: skip
    assert fake_host(monkeypatch, tmp_path / "a", 64, "0::/\n", v2) == 3 * GiB
    unlimited = {"": {"memory.max": "max\n", "memory.current": f"{GiB}\n"}}
    assert fake_host(monkeypatch, tmp_path / "b", 64, "0::/\n", unlimited) == 64 * GiB
    nested = {"": {}, "job": {"memory.max": f"{2 * GiB}\n", "memory.current": f"{GiB}\n"},
              "job/step": {"memory.max": "max\n", "memory.current": f"{GiB}\n"}}  # fmt: skip
    assert fake_host(monkeypatch, tmp_path / "c", 64, "0::/job/step\n", nested) == GiB  # the job's limit binds
    v1 = {"memory": {"memory.limit_in_bytes": f"{4 * GiB}\n", "memory.usage_in_bytes": f"{3 * GiB}\n",
                     "memory.stat": "cache 5\ntotal_inactive_file 0\n"}}  # fmt: skip
    own_v1 = "4:memory:/docker/0123\n3:cpu:/docker/0123\n"  # the host's path, mounted as the container's root
    assert fake_host(monkeypatch, tmp_path / "d", 64, own_v1, v1) == GiB
    assert fake_host(monkeypatch, tmp_path / "e", 2, "0::/\n", v2) == 2 * GiB  # MemAvailable, when it is less
    high = {"": {**v2[""], "memory.high": f"{2 * GiB}\n"}}  # v2's throttle limit, below memory.max
    assert fake_host(monkeypatch, tmp_path / "g", 64, "0::/\n", high) == GiB
    only_high = {"": {"memory.max": "max\n", "memory.high": f"{2 * GiB}\n", "memory.current": f"{GiB}\n"}}
    assert fake_host(monkeypatch, tmp_path / "h", 64, "0::/\n", only_high) == GiB
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as t:
        per_token = t.backend.engine.adapter.kv_bytes_per_token()
        room = {"": {"memory.max": f"{4 * GiB}\n", "memory.current": f"{4 * GiB - 100 * 20 * per_token}\n"}}
        fake_host(monkeypatch, tmp_path / "f", 64, "0::/\n", room)  # room for 100 rows x 20 tokens
        with pytest.raises(rlnb.OperationFailed) as failed:
            t.sample(["n=", "ab"], num_samples=64, max_tokens=18).result()
        assert failed.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
        assert len(t.sample("n=", num_samples=64, max_tokens=18).result().results[0].sequences) == 64


def test_a_seeds_uniforms_are_pinned_and_the_batch_is_left_padded_per_sample():
    """A seed's tokens are a user-visible promise, and they are drawn at these uniforms: the values each prompt's own
    generator drew when ``uniforms`` made one generator and one block per prompt (before its blocks were filled in
    place), for a seed below 2**32, one with high bits and a negative one."""
    from rlnb.engine.sampling import left_pad, uniforms

    cpu = torch.device("cpu")
    assert uniforms(12345, 3, 2, 2, cpu).tolist() == [
        [0.9326963424682617, 0.3806692957878113, 0.8068746328353882, 0.35031944513320923, 0.0681377649307251,
         0.7297577857971191],
        [0.640727698802948, 0.22067022323608398, 0.12191975116729736, 0.17788511514663696, 0.41415321826934814,
         0.35758572816848755],
    ]  # fmt: skip
    assert uniforms(2**40 + 5, 2, 1, 2, cpu).tolist() == [[0.2453378438949585, 0.25742101669311523],
                                                          [0.783587634563446, 0.22403955459594727]]  # fmt: skip
    assert uniforms(-1, 2, 1, 2, cpu).tolist() == [[0.4403383731842041, 0.974308967590332],
                                                   [0.1013537049293518, 0.06760996580123901]]  # fmt: skip
    ids, mask = left_pad([[5, 6, 7], [8]], 2, cpu)
    assert ids.tolist() == [[5, 6, 7], [5, 6, 7], [0, 0, 8], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]]
    assert ids.dtype == mask.dtype == torch.long


def test_many_seeds_uniforms_are_each_seeds_own_bit_for_bit():
    """``seeds_uniforms`` fills one buffer for several seeds (batched trials of their own seeds): seed k's columns
    are, bit for bit, what each of its prompts' generators draws as ``torch.rand(steps, n)`` (the pinned values'
    recipe, rebuilt here apart from ``uniforms``), and the same seed's block does not depend on its neighbours."""
    from rlnb.engine.sampling import _HIGH, seeds_uniforms, uniforms

    def alone(seed: int, prompts: int, n: int, steps: int) -> torch.Tensor:
        low, mix = seed % 2**32, (seed % 2**64 >> 32) * _HIGH % 2**62
        subs = torch.randint(2**62, (prompts,), generator=torch.Generator().manual_seed(low)).tolist()
        blocks = [torch.rand(steps, n, generator=torch.Generator().manual_seed(s ^ mix)) for s in subs]
        return torch.cat(blocks, dim=1)

    cpu = torch.device("cpu")
    seeds = [12345, 2**40 + 5, -1, 0, 2**63 - 1, -(2**63), 12345]
    got = seeds_uniforms(seeds, 3, 2, 4, cpu)
    assert got.shape == (4, len(seeds) * 6)
    for k, seed in enumerate(seeds):
        want = alone(seed, 3, 2, 4)
        assert torch.equal(got[:, k * 6 : (k + 1) * 6], want), (k, seed)
        assert torch.equal(uniforms(seed, 3, 2, 4, cpu), want), seed
    assert not torch.equal(got[:, :6], got[:, 6:12])
    assert seeds_uniforms([], 3, 2, 4, cpu).shape == (4, 0)
